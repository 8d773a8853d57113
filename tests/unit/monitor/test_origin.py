"""Every record's origin: read from what a server reports, hashed so replicas hash alike, looked up off the hot
path and again when a server may be another process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tokenmill.monitor.origin import ASK_AGAIN_S, Origin, Origins, flags_hash, origin_from

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sglang-0.5.23"


def server_info() -> dict[str, object]:
    data: dict[str, object] = json.loads((FIXTURES / "server_info-dense.json").read_text())
    return data


def test_two_replicas_of_one_configuration_hash_alike_and_a_flag_change_does_not() -> None:
    a = server_info()
    b = {**a, "port": 31001, "host": "10.0.0.2", "base_gpu_id": 3, "startup_time": 1.0, "internal_states": []}
    assert flags_hash(a) == flags_hash(b)
    assert flags_hash({**a, "max_running_requests": 105}) != flags_hash(a)
    assert flags_hash({**a, "disable_radix_cache": not a["disable_radix_cache"]}) != flags_hash(a)


def test_sglang_vllm_and_the_simulated_server_are_told_apart() -> None:
    models = {"data": [{"id": "tiny", "owned_by": "sglang"}]}
    sglang = origin_from(models, server_info(), None)
    assert (sglang.served_model, sglang.engine, sglang.engine_version) == ("tiny", "sglang", "0.5.23")
    sim = origin_from(models, {**server_info(), "tokenmill_sim": {"seed": 1}}, None)
    assert sim.engine == "tokenmill-sim" and sim.flags_hash != sglang.flags_hash
    vllm = origin_from({"data": [{"id": "tiny", "owned_by": "vllm"}]}, None, {"version": "0.32.0"})
    assert vllm == Origin("tiny", "vllm", "0.32.0", None)
    assert origin_from(None, None, None) == Origin(None, None, None, None)


def test_lookups_run_in_the_background_once_and_again_after_forget() -> None:
    asked: list[str] = []
    gate = asyncio.Event()

    async def fetch(url: str) -> Origin:
        asked.append(url)
        await gate.wait()
        return Origin("m", "sglang", "0.5.23", f"h{len(asked)}")

    async def main() -> None:
        origins = Origins(fetch)
        assert origins.get("http://a") is None  # never waits: the look-up starts
        assert origins.get("http://a") is None
        gate.set()
        await origins.prime(["http://a"], timeout_s=5)
        assert asked == ["http://a"]  # one look-up for the three asks
        assert origins.get("http://a") == Origin("m", "sglang", "0.5.23", "h1")
        origins.forget("http://a")  # set aside, drained: it may come back re-flagged
        await origins.prime(["http://a"], timeout_s=5)
        assert origins.get("http://a") == Origin("m", "sglang", "0.5.23", "h2")
        await origins.close()

    asyncio.run(main())


def test_a_failing_lookup_never_takes_the_run_down() -> None:
    async def fetch(url: str) -> Origin:
        raise RuntimeError("boom")

    async def main() -> None:
        origins = Origins(fetch)
        await origins.prime(["http://a"], timeout_s=5)
        assert origins.get("http://a") is None
        await origins.close()

    asyncio.run(main())


def test_a_server_that_says_nothing_is_asked_again_a_minute_later_not_for_every_record() -> None:
    asked: list[str] = []
    now = [0.0]

    async def fetch(url: str) -> Origin:
        asked.append(url)
        return Origin(None, None, None, None)  # no /v1/models, no /server_info, no /version

    async def main() -> None:
        origins = Origins(fetch, clock=lambda: now[0])
        await origins.prime(["http://a"], timeout_s=5)
        for _ in range(100):  # a record completed by it, a hundred times
            assert origins.get("http://a") is None
            await asyncio.sleep(0)
        assert asked == ["http://a"]
        now[0] += ASK_AGAIN_S
        origins.get("http://a")
        await origins.prime([], timeout_s=5)
        assert asked == ["http://a"] * 2
        origins.forget("http://a")  # set aside: asked at once when it comes back
        origins.get("http://a")
        await origins.prime([], timeout_s=5)
        assert asked == ["http://a"] * 3
        await origins.close()

    asyncio.run(main())
