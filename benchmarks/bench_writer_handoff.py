"""The CPU the loop <-> store writer hand-off costs per event, without the database or the socket.

Run on demand (never from the test suite):

    python benchmarks/bench_writer_handoff.py [--events 20000 --runs 3]

A closed loop of no-op events between an asyncio loop and a `StoreWriter`, as a socket event
travels in the daemon: the loop hands the event to the writer; the writer asks the loop to take
the event's learning step and waits for it (`Daemon.on_loop`: ``call_soon_threadsafe`` and a
`concurrent.futures.Future`); the writer hands the answer back; the loop, on the answer, sends
the next event. Two ways back for the answer:

* ``future`` — `StoreWriter.submit`'s future, whose done callback wakes the loop
  (``call_soon_threadsafe``): the socket's path before the inbox;
* ``inbox`` — `StoreWriter.run_soon` and a `LoopInbox` (the path now).

``--no-learn`` leaves out the learning step's round trip. Printed: process CPU µs per event
(both threads), the median of `--runs`.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import sys
import time
from collections.abc import Callable

from hpcpredict.daemon.fronts.server import GIL_SWITCH_INTERVAL_S
from hpcpredict.daemon.core.writer import LoopInbox, StoreWriter


async def closed_loop(mode: str, events: int, learn: bool) -> float:
    """CPU µs per event of `events` no-op events handed back and forth."""
    loop = asyncio.get_running_loop()
    writer = StoreWriter()
    writer.start()
    inbox = LoopInbox(loop)
    finished = asyncio.Event()
    sent = 0

    def on_loop(function: Callable[[], int]) -> int:  # Daemon.on_loop, as the writer calls it
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        loop.call_soon_threadsafe(lambda: future.set_result(function()))
        return future.result()

    def event() -> int:  # on the writer: the event's work, here only its learning step
        return on_loop(lambda: 1) if learn else 1

    def answered(*_: object) -> None:
        send_next()

    def send_next() -> None:
        nonlocal sent
        if sent == events:
            finished.set()
            return
        sent += 1
        if mode == "future":
            writer.submit(event).add_done_callback(lambda _: loop.call_soon_threadsafe(answered))
        else:
            writer.run_soon(lambda: inbox.put(answered, event()))

    began = time.process_time()
    send_next()
    await finished.wait()
    used_s = time.process_time() - began
    writer.stop()
    return 1e6 * used_s / events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-learn", action="store_true", help="without the learning step's round trip")
    args = parser.parse_args()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)  # as the daemon runs
    print("| answer back by | learning step round trip | µs CPU / event (median) | runs |")
    print("|---|---|---:|---|")
    for mode in ("future", "inbox"):
        runs = [asyncio.run(closed_loop(mode, args.events, not args.no_learn)) for _ in range(args.runs)]
        print(f"| {mode} | {'no' if args.no_learn else 'yes'} | {statistics.median(runs):.1f} | "
              f"{', '.join(f'{run:.1f}' for run in runs)} |")


if __name__ == "__main__":
    main()
