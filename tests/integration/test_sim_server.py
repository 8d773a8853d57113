"""The simulated SGLang server over real loopback sockets, spoken to with a raw aiohttp client."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.helpers.simserver import metrics, until
from tokenmill.config import FaultSpec, SimSpec
from tokenmill.errors import ConfigError
from tokenmill.sim import SimServer, run_sim_in_thread
from tokenmill.sim.text import prompt_token_ids

CHAT = {"model": "tokenmill-sim", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 64}
# requests stay in flight until the test ends them
SLOW: dict[str, Any] = {"step_base_ms": 1000.0, "prefill_ms_per_1k": 0.0}


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with session.post(url, json=body) as r:
        return r.status, await r.json(content_type=None)


async def test_openai_endpoints_answer_like_sglang() -> None:
    async with SimServer(SimSpec(time_scale=0.001)) as srv, aiohttp.ClientSession() as s:
        status, chat = await post(s, srv.url + "/v1/chat/completions", {**CHAT, "return_token_ids": True})
        assert status == 200
        assert chat["object"] == "chat.completion"
        assert chat["model"] == "tokenmill-sim"
        choice = chat["choices"][0]
        assert choice["message"]["role"] == "assistant"
        assert choice["message"]["reasoning_content"] is None
        assert choice["finish_reason"] in ("stop", "length")
        usage = chat["usage"]
        assert usage["completion_tokens"] == len(choice["response_token_ids"]) <= 64
        assert usage["prompt_tokens"] == len(choice["prompt_token_ids"])
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

        status, comp = await post(s, srv.url + "/v1/completions", {"prompt": "Once upon", "max_tokens": 3})
        assert status == 200
        assert comp["object"] == "text_completion"
        assert comp["choices"][0]["finish_reason"] == "length"
        assert comp["choices"][0]["matched_stop"] is None
        assert len(comp["choices"][0]["text"].split()) == comp["usage"]["completion_tokens"] == 3

        async with s.get(srv.url + "/v1/models") as r:
            models = await r.json()
        assert models["data"][0]["id"] == "tokenmill-sim"
        assert models["data"][0]["max_model_len"] == 32768
        async with s.get(srv.url + "/v1/models/nope") as r:
            assert r.status == 404


async def test_generate_answers_natively_single_and_batched() -> None:
    async with SimServer(SimSpec(time_scale=0.001)) as srv, aiohttp.ClientSession() as s:
        status, one = await post(s, srv.url + "/generate", {"text": "Hello"})
        assert status == 200
        meta = one["meta_info"]
        assert meta["completion_tokens"] == len(one["output_ids"]) <= 128  # native default max_new_tokens
        assert meta["prompt_tokens"] == len(prompt_token_ids("Hello"))
        assert meta["finish_reason"]["type"] in ("stop", "length")
        assert meta["e2e_latency"] > 0
        assert {"id", "cached_tokens", "weight_version"} <= set(meta)

        body = {"input_ids": [[1, 2, 3], [4, 5]], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
        status, many = await post(s, srv.url + "/generate", body)
        assert status == 200
        assert [m["meta_info"]["prompt_tokens"] for m in many] == [3, 2]
        assert all(m["meta_info"]["finish_reason"] == {"type": "length", "length": 4} for m in many)

        status, err = await post(s, srv.url + "/generate", {"sampling_params": {}})
        assert status == 400
        assert "text or input_ids" in err["error"]["message"]


async def test_descriptions_and_health() -> None:
    cfg = SimSpec(max_running_requests=7, context_length=4096, instant=True)
    async with SimServer(cfg) as srv, aiohttp.ClientSession() as s:
        async with s.get(srv.url + "/health") as r:
            assert r.status == 200
        async with s.get(srv.url + "/server_info") as r:
            info = await r.json()
        assert info["max_running_requests"] == 7
        assert info["context_length"] == 4096
        assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 7
        assert info["port"] == srv.port
        assert "api_key" not in json.dumps(info)
        async with s.get(srv.url + "/model_info") as r:
            assert (await r.json())["is_generation"] is True


async def test_same_seed_same_output_other_seed_other_output() -> None:
    body = {"text": "The same prompt", "sampling_params": {"max_new_tokens": 500}}
    outputs = []
    for seed in (1, 1, 2):
        async with SimServer(SimSpec(seed=seed, instant=True)) as srv, aiohttp.ClientSession() as s:
            outputs.append((await post(s, srv.url + "/generate", body))[1]["output_ids"])
    assert outputs[0] == outputs[1]
    assert outputs[0] != outputs[2]


async def test_batch_cap_holds_and_the_queue_shows_in_metrics() -> None:
    async with SimServer(SimSpec(max_running_requests=2, **SLOW)) as srv, aiohttp.ClientSession() as s:
        body = {"text": "long", "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}}
        tasks = [asyncio.create_task(post(s, srv.url + "/generate", body)) for _ in range(6)]

        async def two_running_four_queued() -> bool:
            m = await metrics(s, srv.url)
            return (m["sglang:num_running_reqs"], m["sglang:num_queue_reqs"]) == (2, 4)

        await until(two_running_four_queued)
        m = await metrics(s, srv.url)
        assert m["sglang:mamba_usage"] == 1.0
        for t in tasks:  # the clients hang up: the server aborts their requests
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

        async def all_aborted() -> bool:
            m = await metrics(s, srv.url)
            return m["sglang:num_running_reqs"] == m["sglang:num_queue_reqs"] == 0

        await until(all_aborted)
        assert (await metrics(s, srv.url))["sglang:num_aborted_requests_total"] == 6


async def test_time_scale_makes_a_thousand_steps_fast() -> None:
    async with SimServer(SimSpec(time_scale=0.001)) as srv, aiohttp.ClientSession() as s:
        started = time.monotonic()
        body = {"text": "x", "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}}
        status, out = await post(s, srv.url + "/generate", body)
        wall = time.monotonic() - started
        assert status == 200
        assert out["meta_info"]["completion_tokens"] == 1000
        assert out["meta_info"]["e2e_latency"] >= 999 * 0.02005 * 0.001  # the simulated steps did pass
        assert wall < 5.0  # 20 s of simulated decode


async def test_full_queue_is_refused_with_503() -> None:
    cfg = SimSpec(max_running_requests=1, max_queued_requests=1, **SLOW)
    async with SimServer(cfg) as srv, aiohttp.ClientSession() as s:
        tasks = [asyncio.create_task(post(s, srv.url + "/v1/completions", {"prompt": "p", "max_tokens": 100}))]

        async def running() -> bool:
            return (await metrics(s, srv.url))["sglang:num_running_reqs"] == 1

        await until(running)
        tasks.append(asyncio.create_task(post(s, srv.url + "/v1/completions", {"prompt": "p", "max_tokens": 100})))

        async def queued() -> bool:
            return (await metrics(s, srv.url))["sglang:num_queue_reqs"] == 1

        await until(queued)
        status, err = await post(s, srv.url + "/v1/completions", {"prompt": "p", "max_tokens": 100})
        assert status == 503
        assert err["message"] == "The request queue is full."
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_too_long_prompt_is_a_400_like_sglang() -> None:
    async with SimServer(SimSpec(context_length=100, instant=True)) as srv, aiohttp.ClientSession() as s:
        status, err = await post(s, srv.url + "/v1/chat/completions", {**CHAT, "max_tokens": 95})
        assert status == 400
        assert err["object"] == "error"
        assert err["type"] == "BadRequestError"
        assert err["code"] == 400
        assert "Requested token count exceeds the model's maximum context length of 100 tokens" in err["message"]
        status, err = await post(s, srv.url + "/generate", {"text": "y" * 400})
        assert status == 400
        assert "longer than the model's context length (100 tokens)" in err["error"]["message"]


async def test_metrics_parse_and_count_tokens() -> None:
    async with SimServer(SimSpec(time_scale=0.001, model="m1")) as srv, aiohttp.ClientSession() as s:
        outs = await asyncio.gather(*(post(s, srv.url + "/generate", {"text": f"p{i}"}) for i in range(10)))
        completion = sum(o[1]["meta_info"]["completion_tokens"] for o in outs)
        prompt = sum(o[1]["meta_info"]["prompt_tokens"] for o in outs)
        async with s.get(srv.url + "/metrics") as r:
            text = await r.text()
        assert 'model_name="m1"' in text
        m = await metrics(s, srv.url)
        assert m["sglang:num_requests_total"] == 10
        assert m["sglang:generation_tokens_total"] == completion
        assert m["sglang:prompt_tokens_total"] == prompt
        assert m["sglang:realtime_tokens_total{mode=decode}"] == completion - 10  # the prefill makes token 1
        assert m["sglang:realtime_tokens_total{mode=prefill_compute}"] == prompt
        assert m["sglang:e2e_request_latency_seconds_count"] == 10
        assert m["tokenmill_sim_faults_total{kind=error}"] == 0


@pytest.mark.parametrize("flavor", ["openai", "native"])
async def test_each_fault_kind_is_visible_to_a_raw_client(flavor: str) -> None:
    path, body = ("/v1/chat/completions", CHAT) if flavor == "openai" else ("/generate", {"text": "hi"})
    async with SimServer(SimSpec(instant=True)) as srv, aiohttp.ClientSession() as s:

        async def set_faults(**rates: float) -> None:
            status, _ = await post(s, srv.url + "/sim/faults", rates)
            assert status == 200

        await set_faults(error_rate=1.0)
        async with s.post(srv.url + path, json=body) as r:
            assert r.status == 500
            assert "injected" in (await r.text())

        await set_faults(rate_limit_rate=1.0)
        async with s.post(srv.url + path, json=body) as r:
            assert r.status == 429
            assert r.headers["Retry-After"] == "1"

        await set_faults(malformed_rate=1.0)
        async with s.post(srv.url + path, json=body) as r:
            assert r.status == 200
            raw = await r.read()
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(raw)

        await set_faults(drop_rate=1.0)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as fresh:
            with pytest.raises(aiohttp.ServerDisconnectedError):
                await fresh.post(srv.url + path, json=body)

        await set_faults(stall_rate=1.0, stall_s=60.0)
        with pytest.raises(asyncio.TimeoutError):
            await s.post(srv.url + path, json=body, timeout=aiohttp.ClientTimeout(total=0.3))

        await set_faults()
        status, _ = await post(s, srv.url + path, body)
        assert status == 200
        m = await metrics(s, srv.url)
        for kind in ("error", "rate_limit", "malformed", "drop", "stall"):
            assert m[f"tokenmill_sim_faults_total{{kind={kind}}}"] == 1


async def test_fault_control_refuses_bad_specs_and_reports_counts() -> None:
    cfg = SimSpec(instant=True, faults=FaultSpec(error_rate=1.0))
    async with SimServer(cfg) as srv, aiohttp.ClientSession() as s:
        await post(s, srv.url + "/generate", {"text": "x"})
        async with s.get(srv.url + "/sim/faults") as r:
            state = await r.json()
        assert state["faults"]["error_rate"] == 1.0
        assert state["counts"]["error"] == 1
        status, err = await post(s, srv.url + "/sim/faults", {"error_rate": 2})
        assert status == 400
        assert "error_rate" in err["message"]
        status, err = await post(s, srv.url + "/sim/faults", {"error_rate": 0.7, "drop_rate": 0.7})
        assert status == 400
        assert "must not exceed 1" in err["message"]


async def test_api_key_guards_everything_but_health_and_metrics() -> None:
    async with SimServer(SimSpec(instant=True, api_key="sekrit")) as srv, aiohttp.ClientSession() as s:
        status, err = await post(s, srv.url + "/v1/chat/completions", CHAT)
        assert (status, err) == (401, {"error": "Unauthorized"})
        async with s.get(srv.url + "/v1/models", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
        for open_path in ("/health", "/metrics"):
            async with s.get(srv.url + open_path) as r:
                assert r.status == 200
        async with s.post(srv.url + "/v1/chat/completions", json=CHAT, headers={"Authorization": "Bearer sekrit"}) as r:
            assert r.status == 200


async def test_pause_holds_requests_until_resume() -> None:
    async with SimServer(SimSpec(time_scale=0.001)) as srv, aiohttp.ClientSession() as s:
        assert (await post(s, srv.url + "/sim/pause", {}))[1] == {"paused": True}
        task = asyncio.create_task(post(s, srv.url + "/generate", {"text": "wait for me"}))

        async def queued() -> bool:
            return (await metrics(s, srv.url))["sglang:num_queue_reqs"] == 1

        await until(queued)
        assert not task.done()
        await post(s, srv.url + "/sim/resume", {})
        status, out = await asyncio.wait_for(task, timeout=10)
        assert status == 200
        assert out["meta_info"]["completion_tokens"] > 0


async def test_stopping_answers_in_flight_requests_with_503() -> None:
    srv = SimServer(SimSpec(**SLOW))
    await srv.start()
    async with aiohttp.ClientSession() as s:
        task = asyncio.create_task(post(s, srv.url + "/generate", {"text": "forever"}))

        async def running() -> bool:
            return (await metrics(s, srv.url))["sglang:num_running_reqs"] == 1

        await until(running)
        await srv.stop()
        status, err = await task
        assert status == 503
        assert "shutting down" in err["error"]["message"]


def test_thread_helper_serves_synchronous_clients() -> None:
    with run_sim_in_thread(SimSpec(instant=True)) as sim:
        req = urllib.request.Request(
            sim.url + "/generate",
            data=json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert json.loads(resp.read())["meta_info"]["completion_tokens"] == 5
        url = sim.url
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)


def test_cli_prints_its_url_writes_the_port_file_and_stops_on_sigterm(tmp_path: Path) -> None:
    port_file = tmp_path / "sim.port"
    cmd = [sys.executable, "-m", "tokenmill", "sim", "--port", "0", "--port-file", str(port_file), "--instant"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline()
            assert line.startswith("tokenmill sim listening on http://127.0.0.1:")
            url = line.split()[-1]
            assert url.endswith(":" + port_file.read_text().strip())
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                assert resp.status == 200
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
            assert proc.stdout.read() == ""  # exactly one line on stdout
            assert re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] max_total_num_tokens=", proc.stderr.read())
        finally:
            if proc.poll() is None:
                proc.kill()


async def test_a_taken_port_is_a_clear_config_error() -> None:
    async with SimServer(SimSpec(instant=True)) as first:
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{first.port}.*--port"):
            await SimServer(SimSpec(port=first.port)).start()


async def test_a_refused_batch_item_aborts_the_rest_of_the_batch() -> None:
    cfg = SimSpec(max_running_requests=1, max_queued_requests=1, **SLOW)
    async with SimServer(cfg) as srv, aiohttp.ClientSession() as s:
        status, err = await post(s, srv.url + "/generate", {"text": ["a", "b", "c"]})
        assert status == 503
        assert err["error"]["message"] == "The request queue is full."
        m = await metrics(s, srv.url)
        assert (m["sglang:num_running_reqs"], m["sglang:num_queue_reqs"]) == (0, 0)
        assert m["sglang:num_aborted_requests_total"] == 3
