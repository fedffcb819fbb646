"""Fixed against adaptive concurrency, against the same rate limit: 429s received and wall time.

The fake server from the test suite answers after `LLMTOOL_BENCH_LATENCY` seconds (0.2) behind
a token bucket of `LLMTOOL_BENCH_RPS` requests per second (20, holding one second's worth),
and sends the providers' rate-limit headers. `--n` tasks (40), three model calls each, run
through the real Anthropic client and the whole plugin at `--llm-concurrency=16`, once with
`--llm-adaptive=false` (a fixed window of 16) and once with it on (the default), interleaved over
`--rounds`. Both get `--llm-retries=1000`, so the fixed window's 429 storm is retried to the end
rather than failing tasks. Target: adaptive receives at most a tenth of fixed's 429s, at no
worse than 1.1x its wall time.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from _harness import PASSED, Run, fmt_ratio, header, parse_args, time_run, workdir
from bench_concurrency import script, write_tasks

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_llm_server import FakeLLMServer

MAX_429_RATIO = 0.1
MAX_TIME_RATIO = 1.1


def main() -> None:
    args = parse_args(__doc__ or "", default_n=40, default_rounds=3)
    latency = float(os.environ.get("LLMTOOL_BENCH_LATENCY", "0.2"))
    rps = float(os.environ.get("LLMTOOL_BENCH_RPS", "20"))
    header(
        f"bench_ratelimit: {args.n} tasks x 3 model calls, fake server answering after "
        f"{latency} s behind a limit of {rps:g} requests/s",
        ["fixed = --llm-adaptive=false, adaptive = true; both --llm-concurrency=16"],
    )
    times: dict[str, list[float]] = {"fixed": [], "adaptive": []}
    limited: dict[str, list[int]] = {"fixed": [], "adaptive": []}
    with workdir(args.keep) as root, FakeLLMServer(latency=latency) as server:
        prompts = write_tasks(root / "tasks.jsonl", args.n)
        os.environ.update(ANTHROPIC_API_KEY="bench-key", ANTHROPIC_BASE_URL=server.url)
        common = ["--llm-model=haiku", "--llm-concurrency=16", "--llm-retries=1000", "tasks.jsonl"]
        runs = {
            "fixed": Run("fixed", [*common, "--llm-adaptive=false"], PASSED, args.n),
            "adaptive": Run("adaptive", [*common, "--llm-adaptive=true"], PASSED, args.n),
        }
        for index in range(args.rounds):
            order = ["fixed", "adaptive"] if index % 2 == 0 else ["adaptive", "fixed"]
            for label in order:
                server.reset()
                script(server, prompts)
                server.rate_limit(requests_per_second=rps)
                elapsed = time_run(runs[label], root)
                count = sum(1 for r in server.requests if r.status == 429)
                times[label].append(elapsed)
                limited[label].append(count)
                print(
                    f"  round {index + 1}  {label:<9} {elapsed:8.3f} s  {count:6d} x 429",
                    flush=True,
                )
    fixed_t, ours_t = (statistics.median(times[k]) for k in ("fixed", "adaptive"))
    fixed_429, ours_429 = (statistics.median(limited[k]) for k in ("fixed", "adaptive"))
    ratio_429 = ours_429 / fixed_429 if fixed_429 else float("nan")
    ratio_t = ours_t / fixed_t
    print("-" * 78)
    print(f"  {'medians':<12} {'429s':>8} {'wall time':>12}")
    print(f"  {'fixed':<12} {fixed_429:8.0f} {fixed_t:10.3f} s")
    print(f"  {'adaptive':<12} {ours_429:8.0f} {ours_t:10.3f} s")
    print(f"  adaptive/fixed: 429s {fmt_ratio(ratio_429)}, wall time {fmt_ratio(ratio_t)}")
    print("-" * 78)
    ok = ratio_429 <= MAX_429_RATIO and ratio_t <= MAX_TIME_RATIO
    print(
        f"{'PASS' if ok else 'FAIL'}: 429s {fmt_ratio(ratio_429)} (target <= {MAX_429_RATIO:g}x), "
        f"wall time {fmt_ratio(ratio_t)} (target <= {MAX_TIME_RATIO:g}x)"
    )
    if args.strict and not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
