import pytest
from ledger import Entry, parse_rows
from ledger.model import format_cents, to_cents
from ledger.sample import make_text


def test_basic_rows_and_memo_with_commas():
    text = "date,account,amount,memo\n2024-01-02, cash ,12.5,coffee, large\n2024-01-03,bank,-3,\n"
    assert parse_rows(text) == [
        Entry("2024-01-02", "cash", 1250, "coffee, large"),
        Entry("2024-01-03", "bank", -300, ""),
    ]


def test_comments_blank_lines_crlf_and_missing_final_newline():
    text = "# ledger\r\n\r\ndate, account, amount, memo\r\n# note\r\n2024-02-01,fees,0.07,x"
    assert parse_rows(text) == [Entry("2024-02-01", "fees", 7, "x")]


def test_empty_and_header_only():
    assert parse_rows("") == []
    assert parse_rows("date,account,amount,memo\n") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b,c,d\n", "line 1: expected header"),
        ("date,account,amount,memo\n2024-01-01,cash,1\n", "line 2: expected 4 fields, got 3"),
        ("date,account,amount,memo\n\n,cash,1,\n", "line 3: empty date or account"),
        ("date,account,amount,memo\n2024-01-01,cash,1.234,\n", "line 2: too many decimals"),
        ("date,account,amount,memo\n2024-01-01,cash,abc,\n", "line 2: bad amount 'abc'"),
    ],
)
def test_errors_name_the_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_rows(text)


def test_sample_round_trip():
    text = make_text(300)
    rows = parse_rows(text)
    assert len(rows) == 300
    lines = [line for line in text.splitlines()[2:] if line]
    assert [f"{r.date},{r.account},{format_cents(r.cents)},{r.memo}" for r in rows] == lines


def test_to_cents():
    assert [to_cents(v) for v in ["0", "1.5", "-0.05", "+2.10", ".5"]] == [0, 150, -5, 210, 50]
    for bad in ["", "-", ".", "1.", "1e3", "1,5"]:
        with pytest.raises(ValueError):
            to_cents(bad)
