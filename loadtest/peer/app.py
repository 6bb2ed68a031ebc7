"""The peer `make bench` measures seckill against: the same sale, written the way a
Python developer would write it with Starlette and redis-py's own lock.

    GET  /stock/reduce   lock, read stock, write stock-1 and lucky+1 and a sale record, unlock
    POST /stock/reset    {"stock": N}: a new sale
    GET  /healthz        what runs here, in the shape the load test reads

It speaks just enough of seckill's protocol (same Redis keys, same answers) for the
load test and its checker to judge it like any strategy. It has no fencing token (a
redis-py lock has none), and it waits for the lock the way redis-py does: it tries
again every `sleep` seconds, 0.1 by default. PEER_LOCK_SLEEP sets it; `make bench`
runs the peer at the interval that sold most when measured on this machine (the
README's bench section shows the sweep), said in the row's label.

Run as two instances, as seckill is (scripts/bench.sh does this):
    PEER_PORT=8080 uvicorn app:app --port 8080 --no-access-log
"""

import json
import os
import time
import uuid

import redis.asyncio as redis
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

PORT = int(os.environ.get("PEER_PORT", "8080"))
# redis-py's poll interval while the lock is busy, in seconds (its default is 0.1).
LOCK_SLEEP = float(os.environ.get("PEER_LOCK_SLEEP", "0.1"))
INSTANCE = f"python-peer-{PORT}"
# A pool that makes a request wait for a free connection instead of failing with "Too
# many connections" when 250 buyers arrive at once.
POOL = redis.BlockingConnectionPool.from_url(
    os.environ.get("SECKILL_REDIS_URL", "redis://127.0.0.1:6379"), max_connections=64, timeout=10, decode_responses=True
)
REDIS = redis.Redis(connection_pool=POOL)


async def reduce(request):
    waiting_since = time.time()
    # One Lock object per request: redis-py keeps the owner's token in it.
    lock = REDIS.lock("lock:stock", timeout=3, sleep=LOCK_SLEEP, blocking_timeout=10)
    if not await lock.acquire():
        return JSONResponse({"error": "lock_timeout", "message": "the lock stayed busy for 10 s"}, status_code=503)
    locked_at = time.time()
    sold_unit = None
    try:
        stock = int(await REDIS.get("stock") or 0)
        if stock <= 0:
            sold, stock_after = False, 0
        else:
            record = {
                "sale_id": uuid.uuid4().hex,
                "instance": INSTANCE,
                "port": PORT,
                "strategy": "python-peer",
                "stock_before": stock,
                # Whose: the history checker settles a lost answer by its buyer's record.
                "buyer": request.query_params.get("buyer"),
                "lock_wait_ms": (locked_at - waiting_since) * 1000,
                "locked_at_ms": int(locked_at * 1000),
                "sold_at_ms": int(time.time() * 1000),
            }
            async with REDIS.pipeline(transaction=True) as pipe:
                pipe.set("stock", stock - 1).incr("lucky").rpush("sales", json.dumps(record))
                await pipe.execute()
            sold, stock_after = True, stock - 1
            # seckill's `SoldUnit`: the unit this sale took, for the history checker. The
            # peer's resets name no sale, and its stock is in one piece.
            sold_unit = {"sale": "", "segment": 0, "unit": stock, "sale_id": record["sale_id"]}
    finally:
        await lock.release()
    answer = {
        "port": PORT,
        "instance": INSTANCE,
        "strategy": "redis",
        "sold": sold,
        "stock_after": stock_after,
        "lock_wait_ms": (locked_at - waiting_since) * 1000,
        "message": f"{PORT} reduce stock end!",
    }
    if sold_unit is not None:
        answer["sold_unit"] = sold_unit
    return JSONResponse(answer)


async def reset(request):
    stock = int((await request.json()).get("stock", 300))
    async with REDIS.pipeline(transaction=True) as pipe:
        pipe.set("stock", stock).set("lucky", 0).set("stock:initial", stock)
        # No sale name (seckill's `stock:sale`): the peer's answers name the sale "".
        pipe.delete("sales", "stock:outcomes", "stock:fence", "stock:sale").incr("stock:generation")
        await pipe.execute()
    return JSONResponse({"stock": stock, "lucky": 0, "sales": 0, "initial": stock})


async def healthz(request):
    # seckill's `Health` (src/api.rs), copied by hand: the load test reads the lock it
    # should judge this by (redis, without tokens) and how the sale runs (the plainest way).
    return JSONResponse({
        "status": "ok",
        "strategy": "redis",
        "fencing": "no_tokens",
        "local_queue": False,
        "hand_over": False,
        "stock_segments": 1,
        "sold_out_flag": False,
        "one_per_buyer": False,
        "orders": False,
        "stock_wait_replicas": 0,
        "group_max": 0,
        "instance": INSTANCE,
        "port": PORT,
        "key_prefix": "",
        "lock_stats": None,
    })


app = Starlette(routes=[
    Route("/stock/reduce", reduce, methods=["GET", "POST"]),
    Route("/stock/reset", reset, methods=["POST"]),
    Route("/healthz", healthz),
])
