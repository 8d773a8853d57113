"""`tokenmill sim --model M --gpu G [SGLang flags]` as a process: the twin's pools in its log and /server_info."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path


def test_twin_process_reports_the_pools_its_flags_give(tmp_path: Path) -> None:
    port_file = tmp_path / "twin.port"
    cmd = [
        sys.executable, "-m", "tokenmill", "sim", "--port", "0", "--port-file", str(port_file),
        "--model", "qwen3.6-27b", "--gpu", "rtx-pro-6000", "--time-scale", "0.01",
        "--mamba-scheduler-strategy", "no_buffer", "--mem-fraction-static", "0.9",
    ]  # fmt: skip
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline()
            assert line.startswith("tokenmill sim listening on http://127.0.0.1:"), proc.stderr.read()
            url = line.split()[-1]
            assert url.endswith(":" + port_file.read_text().strip())
            with urllib.request.urlopen(url + "/server_info", timeout=10) as resp:
                info = json.loads(resp.read())
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
            log = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
    assert info["engine_flags"] == "--mamba-scheduler-strategy no_buffer --mem-fraction-static 0.9"
    assert info["mamba_radix_cache_strategy"] == "no_buffer"
    assert info["mem_fraction_static"] == 0.9
    twin = info["tokenmill_twin"]
    (state,) = info["internal_states"]
    computed = (state["effective_max_running_requests_per_dp"], state["max_mamba_cache_size"])
    assert computed == (twin["max_running"], twin["mamba_slots"])
    assert state["effective_max_running_requests_per_dp"] == twin["mamba_slots"] // 3
    assert (info["max_running_requests"], info["max_mamba_cache_size"]) == (None, None)  # not given as flags
    assert f"Mamba Cache is allocated. max_mamba_cache_size: {twin['mamba_slots']}," in log
    assert f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {info['max_total_num_tokens']}, K size:" in log
    assert f"max_running_requests={twin['max_running']}, context_len=262144" in log
