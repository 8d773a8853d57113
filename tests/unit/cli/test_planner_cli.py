"""``tokenmill plan`` end to end through click: tables, JSON, lists, datasets and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenmill.cli import cli
from tokenmill.errors import ConfigError


def run(*args: str) -> str:
    out = CliRunner().invoke(cli, ["plan", *args], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output + repr(out.exception)
    return out.output


def test_done_when_command_prints_the_strategy_table() -> None:
    text = run("--model", "qwen3.6-27b", "--gpu", "rtx-pro-6000")
    assert "Strategies at your dtypes" in text
    assert "bound by state slots" in text  # the default (extra_buffer) is state-bound
    assert "--disable-radix-cache --max-running-requests" in text
    note = "note: eta_bw 0.84 (default for gddr7: 0.7 x 1.2 (GDDR), uncalibrated; state/KV traffic at 0.5 x eta_bw)"
    assert "What if" in text and note in text
    assert "SGLang 0.5.23 rules" in text
    # rows are spelled for the default SGLang release (0.5.23): new strategy name, no_buffer with overlap off
    assert "--mamba-radix-cache-strategy no_buffer --disable-overlap-schedule" in text
    assert "--mamba-scheduler-strategy" not in text


def test_sglang_version_decides_auto_and_the_flag_spellings() -> None:
    old = json.loads(run("-m", "qwen3.6-27b", "-g", "rtx-pro-6000", "--sglang-version", "0.5.10", "--json"))
    new = json.loads(run("-m", "qwen3.6-27b", "-g", "rtx-pro-6000", "--json"))
    assert (old["assumptions"]["sglang_version"], new["assumptions"]["sglang_version"]) == ("0.5.10", "0.5.23")
    # up to 0.5.13 `auto` is no_buffer (S = 3, overlap off); 0.5.23 picks extra_buffer (S = 5)
    assert (old["plan"]["strategy"], old["plan"]["slots_per_request"]) == ("no_buffer", 3)
    assert (new["plan"]["strategy"], new["plan"]["slots_per_request"]) == ("extra_buffer", 5)
    old_flags = " ".join(row["flags"] for row in old["what_if"])
    new_flags = " ".join(row["flags"] for row in new["what_if"])
    assert "--mamba-scheduler-strategy" in old_flags and "--mamba-radix-cache-strategy" not in old_flags
    assert "--mamba-radix-cache-strategy" in new_flags and "--mamba-scheduler-strategy" not in new_flags


def test_json_output_is_complete() -> None:
    data = json.loads(
        run(
            "-m",
            "qwen3.6-27b",
            "-g",
            "rtx-pro-6000",
            "--gpus",
            "4",
            "--prompts",
            "50000",
            "--input-len",
            "900",
            "--output-len",
            "3000",
            "--flags",
            "--mamba-scheduler-strategy extra_buffer",
            "--flags",
            "--mem-fraction-static 0.88",
            "--compare",
            "h100",
            "--eta",
            "0.55",
            "--json",
        )
    )
    plan = data["plan"]
    assert plan["strategy"] == "extra_buffer" and plan["slots_per_request"] == 5
    assert plan["mem_fraction_static"] == 0.88 and not plan["mem_fraction_auto"]
    assert plan["binding"] == "state slots"
    assert plan["fleet_tok_s"] == pytest.approx(4 * plan["tok_s_per_gpu"])
    assert plan["eta_s"] == pytest.approx(50000 * 3000 / plan["fleet_tok_s"])
    assert data["assumptions"]["eta_bw"] == 0.55 and data["assumptions"]["eta_request_ratio"] == 0.5
    assert data["workload"] == {
        "prompts": 50000,
        "input_len": 900,
        "output_len": 3000,
        "avg_context": 2400,
        "max_tokens": 3000,
        "ignore_eos": False,
        "source": "given",
    }
    assert data["compare"][0]["gpu"] == "h100" and data["compare"][0]["percent"] > 0
    ranks = [row["plan"]["tok_s_per_gpu"] for row in data["what_if"] if row["plan"]]
    assert ranks == sorted(ranks, reverse=True)
    assert sum(row["base"] for row in data["what_if"]) == 1


def test_lists() -> None:
    text = run("--list-models", "--list-gpus")
    assert "Qwen3-Next-80B-A3B" in text and "Nemotron-H-8B" in text
    assert "rtx-pro-6000-max-q" in text and "mi300x" in text
    assert "500?" in text  # the PRO 6000's BF16 peak is derived, not read from a datasheet


def test_weights_that_do_not_fit_show_what_does() -> None:
    text = run("-m", "llama-3.1-70b", "-g", "h100")
    assert "leave nothing for KV/state" in text
    assert "Configurations that fit" in text and "--quantization fp8" in text


def test_dataset_sample_sets_the_workload(tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    rows = [{"messages": [{"role": "user", "content": "x" * 400}]} for _ in range(30)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = json.loads(run("-m", "qwen3-32b", "-g", "h200", "--dataset", str(data), "--sample", "10", "--json"))
    w = out["workload"]
    assert w["input_len"] == 100  # 400 characters at 4 a token
    assert w["prompts"] == 30  # counted from the file
    assert "measured on 10 rows of prompts.jsonl" in w["source"] and "chars/token" in w["source"]
    given = json.loads(run("-m", "qwen3-32b", "-g", "h200", "--dataset", str(data), "--input-len", "50", "--json"))
    assert (given["workload"]["input_len"], given["workload"]["prompts"]) == (50, 30)


def test_missing_arguments_and_unknown_names() -> None:
    out = CliRunner().invoke(cli, ["plan", "--planner-model", "qwen3.6-27b"])
    assert out.exit_code == 2 and "give --planner-model and --gpu" in out.output
    named = run("-g", "h200", "--flags", "--model-path Qwen/Qwen3.6-27B --tp 1", "--no-what-if", "--json")
    assert json.loads(named)["model"]["name"] == "Qwen3.6-27B"
    out = CliRunner().invoke(cli, ["plan", "--model", "qwen3.6-27b", "--gpu", "tpu"])
    assert isinstance(out.exception, ConfigError) and "unknown GPU 'tpu'" in str(out.exception)
    out = CliRunner().invoke(cli, ["plan", "-m", "qwen3.6-27b", "-g", "h100", "--flags", "--mem-fraction-static x"])
    assert isinstance(out.exception, ConfigError) and "takes a number" in str(out.exception)


def test_a_config_path_and_a_user_gpu_file(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama",
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "intermediate_size": 8192,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(
        "gpus:\n  - {key: lab-card, name: Lab Card, memory_mib: 16384, bandwidth_gbs: 500, bf16_tflops: 80}\n"
    )
    data = json.loads(run("-m", str(tmp_path), "-g", "lab-card", "--gpu-file", str(gpus), "--no-what-if", "--json"))
    assert data["gpu"]["key"] == "lab-card"
    assert data["model"]["recurrent_layers"] == 0
    assert data["what_if"] == []


def test_dataset_lengths_counted_with_a_tokenizer(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tokenmill.planner.sample import measure_prompts

    words = Tokenizer(models.WordLevel({"[UNK]": 0, "user": 1, ":": 2, "hello": 3, "world": 4}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    # transformers leaves the tokenizer's __init__ unannotated
    fast = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]")  # type: ignore[no-untyped-call]
    fast.chat_template = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
    fast.save_pretrained(str(tmp_path / "tok"))
    data = tmp_path / "chat.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": "hello world hello"}]},  # user : hello world hello -> 5
        {"prompt": "hello world"},  # plain text is encoded as is -> 2
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    sample = measure_prompts(str(data), rows=10, tokenizer=str(tmp_path / "tok"))
    assert (sample.rows, sample.mean_tokens, sample.total_rows) == (2, 3.5, 2)
    assert "tokenizer" in sample.method
