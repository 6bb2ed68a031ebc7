"""The Python lock peers of `make lockbench`: the locks Python users reach for, measured
the way lockbench measures this project's (loadtest/peers/README.md is the contract).

    redis-py           redis-py's Lock, the canonical one. SET NX PX to take the key;
                       while it is taken, it sleeps `sleep` seconds (0.1 by default)
                       and tries again.
    python-redis-lock  python-redis-lock's Lock. SET NX EX as well, but a waiter blocks
                       on BLPOP of a signal list, and the release pushes to that list:
                       one waiter wakes per release, without polling.
    pottery-redlock    pottery's Redlock. SET NX PX on the five masters at once (a new
                       thread pool for every call), held when a majority said yes.
                       Otherwise it deletes what it got, sleeps up to 0.2 s at random
                       and tries again.

How it runs:
    1. Parse the arguments and check that every server answers a PING.
    2. For every contender count, two runs: all contenders on one key, then each on
       a key of its own.
    3. A run starts one thread per contender. Each acquires and releases as fast as it
       can until the seconds are up, timing every pair from the acquire's call to the
       release's answer.
    4. One JSON line per run on stdout.

These libraries are synchronous, so a contender is a thread, as in a Python service
with a thread pool, and all threads share one redis.Redis client (one connection pool).
The cost Python adds: the GIL lets one thread run Python at a time, so 64 contender
threads (and pottery's pool threads) share one core, and a waiter whose answer has
arrived may wait for the GIL to read it.

    python lockpeers.py NAME --contenders 1,16,64 --seconds 2 [--sleep SECONDS]
"""

import argparse
import functools
import json
import logging
import math
import os
import sys
import threading
import time

import pottery
import redis
import redis_lock

# The lease of every lock, as lockbench's: longer than any pair takes.
LEASE_SECONDS = 10
# redis-py's poll interval when the caller does not choose one: what its users get.
REDIS_PY_DEFAULT_SLEEP = 0.1
# How long redis-py and pottery wait for the lock before giving up (an error).
# Longer than the lease, so a lock left by a killed run expires first.
ACQUIRE_TIMEOUT_SECONDS = 30
# python-redis-lock refuses a timeout longer than the lease. Its timeout is how long a
# waiter goes without a release's signal, not its whole wait.
SIGNAL_TIMEOUT_SECONDS = LEASE_SECONDS
CONNECT_TIMEOUT_SECONDS = 5
# Longer than any command we send blocks (python-redis-lock's BLPOP: the lease).
SOCKET_TIMEOUT_SECONDS = 30
# Connections per contender in each pool. pottery returns as soon as a majority of
# masters answered, while its other commands are still on their way, so a contender
# can have two commands in flight to one master.
CONNECTIONS_PER_CONTENDER = 2

PEERS = ("redis-py", "python-redis-lock", "pottery-redlock")


class CannotRun(Exception):
    """A problem that stops the measurement; its message names the fix."""


# --- 1. Arguments and servers ----------------------------------------------------------


def contender_counts(text):
    try:
        counts = [int(count) for count in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a list of contender counts; give whole numbers above 0, e.g. 1,16,64")
    return counts


def positive_seconds(text):
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0 or math.isinf(seconds):
        raise argparse.ArgumentTypeError(f"'{text}' is not a number of seconds above 0, e.g. 2 or 0.5")
    return seconds


def parse_arguments():
    parser = argparse.ArgumentParser(
        prog="loadtest/peers/python/run",
        description="Measures a Python lock peer of `make lockbench` (loadtest/peers/README.md).",
    )
    parser.add_argument("name", metavar="NAME", choices=PEERS, help="one of " + ", ".join(PEERS))
    parser.add_argument("--contenders", type=contender_counts, required=True, help="e.g. 1,16,64")
    parser.add_argument("--seconds", type=positive_seconds, required=True, help="per run, e.g. 2")
    parser.add_argument("--sleep", type=positive_seconds, help=f"redis-py's poll interval (default {REDIS_PY_DEFAULT_SLEEP})")
    arguments = parser.parse_args()
    if arguments.sleep is not None and arguments.name != "redis-py":
        parser.error(f"--sleep sets redis-py's poll interval; {arguments.name} does not take it")
    return arguments


def lock_redis_url():
    return os.environ.get("SECKILL_LOCK_REDIS_URL") or os.environ.get("SECKILL_REDIS_URL") or "redis://127.0.0.1:6379"


def redlock_urls():
    urls = os.environ.get("SECKILL_REDLOCK_URLS")
    if urls:
        return [url.strip() for url in urls.split(",") if url.strip()]
    return [f"redis://127.0.0.1:{port}" for port in range(6381, 6386)]


def client(url, max_connections):
    """One client and its pool, shared by every contender thread (redis.Redis is thread-safe)."""
    try:
        pool = redis.ConnectionPool.from_url(
            url,
            max_connections=max_connections,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
        )
    except ValueError as error:
        raise CannotRun(f"'{url}' is not a Redis URL ({error}); fix the SECKILL_* setting that gave it") from None
    return redis.Redis(connection_pool=pool)


def check_answers(server, url, fix):
    try:
        server.ping()
    except redis.RedisError as error:
        raise CannotRun(f"the Redis at {url} does not answer ({error}): is Redis up? {fix}") from None


# --- The three peers: what one contender holds, and how it takes and gives it back ----
#
# A contender builds its own lock object on its key and reuses it for every pair, as a
# worker thread of a service would keep one. The objects are built in the main thread:
# each library registers its Lua scripts when the first one is made.


class Peer:
    """A lock library, connected: its strategy name and a factory of contender locks."""

    def __init__(self, strategy, lock_on):
        self.strategy = strategy
        # key -> (acquire, release): acquire() is True when held, False when it gave up.
        self.lock_on = lock_on


def redis_py(most_contenders, sleep):
    url = lock_redis_url()
    shared = client(url, CONNECTIONS_PER_CONTENDER * most_contenders)
    check_answers(shared, url, "make services starts it, or set SECKILL_LOCK_REDIS_URL")
    strategy = "redis-py Lock"
    if sleep is None:
        sleep = REDIS_PY_DEFAULT_SLEEP
    elif sleep != REDIS_PY_DEFAULT_SLEEP:
        strategy += f" (sleep {sleep:g})"  # the report must say what it ran with

    def lock_on(key):
        # The token lives in thread-local storage (redis-py's default), and each
        # contender has its own Lock anyway.
        lock = shared.lock(key, timeout=LEASE_SECONDS, sleep=sleep, blocking_timeout=ACQUIRE_TIMEOUT_SECONDS)
        return lock.acquire, lock.release

    return Peer(strategy, lock_on)


def python_redis_lock(most_contenders):
    url = lock_redis_url()
    shared = client(url, CONNECTIONS_PER_CONTENDER * most_contenders)
    check_answers(shared, url, "make services starts it, or set SECKILL_LOCK_REDIS_URL")

    def lock_on(key):
        # Redis keys: lock:<key>, and the signal list lock-signal:<key>. A waiter holds
        # a connection while it blocks on BLPOP, hence a pool of one per contender at least.
        lock = redis_lock.Lock(shared, key, expire=LEASE_SECONDS)
        return functools.partial(lock.acquire, timeout=SIGNAL_TIMEOUT_SECONDS), lock.release

    return Peer("python-redis-lock", lock_on)


def pottery_redlock(most_contenders):
    urls = redlock_urls()
    masters = [client(url, CONNECTIONS_PER_CONTENDER * most_contenders) for url in urls]
    for url, master in zip(urls, masters):
        check_answers(master, url, "make services starts the five Redlock masters, or set SECKILL_REDLOCK_URLS")
    # pottery logs each master's failure with its traceback. The errors are counted
    # here instead: raise_on_redis_errors makes a lost majority raise.
    logging.getLogger("pottery").setLevel(logging.CRITICAL)

    def lock_on(key):
        # A Redlock keeps the token of its current hold in the object, so threads
        # must not share one: each contender has its own, on the shared clients.
        # The Redis key is redlock:<key>. auto_release_time is in seconds (pottery 3).
        lock = pottery.Redlock(
            key=key, masters=set(masters), auto_release_time=LEASE_SECONDS, raise_on_redis_errors=True
        )
        return functools.partial(lock.acquire, timeout=ACQUIRE_TIMEOUT_SECONDS), lock.release

    return Peer("pottery Redlock", lock_on)


# --- 2 and 3. The runs --------------------------------------------------------------------


class Tally:
    """One contender's pairs and errors; read after its thread ended."""

    def __init__(self):
        self.pair_seconds = []
        self.errors = 0
        self.first_error = None  # (when, message)


def contend(acquire, release, stop, tally):
    while not stop.is_set():
        began = time.perf_counter()
        try:
            if not acquire():
                raise TimeoutError("gave up waiting for the lock")
            release()
        except Exception as error:  # any failure of a pair is counted, as lockbench does
            tally.errors += 1
            if tally.first_error is None:
                tally.first_error = (time.perf_counter(), f"{type(error).__name__}: {error}")
        else:
            tally.pair_seconds.append(time.perf_counter() - began)


def percentile_ms(sorted_seconds, fraction):
    """The nearest rank, as lockbench's histogram reads it: 0 when there is nothing."""
    if not sorted_seconds:
        return 0.0
    rank = max(math.ceil(fraction * len(sorted_seconds)), 1)
    return sorted_seconds[rank - 1] * 1000


def run(peer, name, contenders, one_key, seconds):
    key = f"bench:peer:{name}"
    keys = [key if one_key else f"{key}:{i}" for i in range(contenders)]
    locks = [peer.lock_on(key) for key in keys]
    tallies = [Tally() for _ in keys]
    stop = threading.Event()
    # Daemon threads: an interrupted run exits without waiting for them.
    threads = [
        threading.Thread(target=contend, args=(acquire, release, stop, tally), daemon=True)
        for (acquire, release), tally in zip(locks, tallies)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started

    pairs = sorted(pair for tally in tallies for pair in tally.pair_seconds)
    first_errors = sorted(tally.first_error for tally in tallies if tally.first_error)
    return {
        "strategy": peer.strategy,
        "contenders": contenders,
        "keys": "one" if one_key else "one each",
        "pairs": len(pairs),
        "errors": sum(tally.errors for tally in tallies),
        "pairs_per_second": round(len(pairs) / elapsed, 1),
        "median_pair_ms": round(percentile_ms(pairs, 0.5), 3),
        "p99_pair_ms": round(percentile_ms(pairs, 0.99), 3),
        "first_error": first_errors[0][1] if first_errors else None,
    }


# --- 4. Output -----------------------------------------------------------------------------


def connect(arguments):
    most = max(arguments.contenders)
    if arguments.name == "redis-py":
        return redis_py(most, arguments.sleep)
    if arguments.name == "python-redis-lock":
        return python_redis_lock(most)
    return pottery_redlock(most)


def main():
    arguments = parse_arguments()
    try:
        peer = connect(arguments)
        for contenders in arguments.contenders:
            for one_key in (True, False):
                keys = "one key" if one_key else "a key each"
                print(f"[python-peers] {peer.strategy}: contenders {contenders}, {keys}", file=sys.stderr)
                result = run(peer, arguments.name, contenders, one_key, arguments.seconds)
                print(json.dumps(result), flush=True)
    except CannotRun as problem:
        sys.exit(f"[python-peers] error: {problem}")
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
