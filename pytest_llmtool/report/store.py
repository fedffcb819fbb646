"""The run's results as the controller holds them: compressed JSON, decoded one at a time.

A small result is some 10 KB as Python objects and 1 KB as JSON, and the controller of a
100k-task run must hold every one until the report is written. So it keeps the JSON the
worker sent (also what the journal and `report.json` hold) compressed, and hands the kinds
and writers a `Sequence` that decodes a result when it is read and lets it go after: a
`nop` task's result takes about 50 bytes, and each pass over the results costs a decode (tens
of microseconds) per result. Code that reads the results should pass over them, keeping what
it needs, rather than copy them into lists; a reader that can wait reads along another's pass
(`read_along`), so that the two cost one decode.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar, overload

from pydantic import BaseModel

R = TypeVar("R", bound=BaseModel)
# Fast compression with a small window and hash table: each result is compressed on its own.
LEVEL, WBITS, MEMLEVEL = 1, 14, 4


class ResultStore(Sequence[R], Generic[R]):
    """Results of one type, kept as compressed JSON in the order they arrived."""

    def __init__(self, result_type: type[R]) -> None:
        self.result_type = result_type
        self._blobs: list[bytes] = []
        # The first result is the dictionary the others are compressed against: results of
        # one kind share most of their text (keys, checks, prompts), so a nop task's result
        # keeps about 50 bytes instead of 500.
        self._zdict = b""
        # Readers waiting for the next whole pass, and whether that pass reached the end.
        self._along: list[tuple[Callable[[R], None], list[bool]]] = []

    def append_json(self, text: str) -> None:
        """Keep one result given as its JSON (`model_dump_json()`)."""
        data = text.encode("utf-8")
        if not self._zdict:
            self._zdict = data[-(1 << WBITS) :]
        packer = zlib.compressobj(LEVEL, zlib.DEFLATED, WBITS, MEMLEVEL, zdict=self._zdict)
        self._blobs.append(packer.compress(data) + packer.flush())

    def append(self, result: R) -> None:
        self.append_json(result.model_dump_json())

    def json_texts(self) -> Iterator[str]:
        """Each result's JSON as kept, without building the model: for writing it out."""
        for blob in self._blobs:
            yield self._unpack(blob).decode("utf-8")

    def _unpack(self, blob: bytes) -> bytes:
        unpacker = zlib.decompressobj(WBITS, zdict=self._zdict)
        return unpacker.decompress(blob) + unpacker.flush()

    def __len__(self) -> int:
        return len(self._blobs)

    @overload
    def __getitem__(self, index: int) -> R: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[R]: ...

    def __getitem__(self, index: int | slice) -> R | Sequence[R]:
        if isinstance(index, slice):
            return [self._decode(blob) for blob in self._blobs[index]]
        return self._decode(self._blobs[index])

    def __iter__(self) -> Iterator[R]:
        along, self._along = self._along, []
        for blob in self._blobs:
            result = self._decode(blob)
            for entry in list(along):  # a copy: a reader that raises leaves it
                try:
                    entry[0](result)
                except Exception:  # its own pass will raise it where it belongs
                    along.remove(entry)
            yield result
        for _, done in along:
            done.append(True)

    def read_along(self, reader: Callable[[R], None]) -> Callable[[], bool]:
        """Have `reader` see every result, in order, on the next pass over the whole store,
        whoever makes it: the run's summaries make one, and a writer reading along saves a
        decode per result. Ask once the store is complete: a result kept later is not read.
        The returned check says whether that pass reached the end; when it says no (no such
        pass came, it stopped early, or the reader raised: that pass goes on without it),
        the reader saw only part of the results (or none) and must be given them by a pass
        of its own."""
        done: list[bool] = []
        if self._blobs:
            self._along.append((reader, done))
        else:
            done.append(True)  # nothing to read
        return lambda: bool(done)

    def _decode(self, blob: bytes) -> R:
        return self.result_type.model_validate_json(self._unpack(blob))

    def __repr__(self) -> str:
        return f"ResultStore({self.result_type.__name__}, {len(self)} results)"
