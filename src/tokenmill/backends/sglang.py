"""SGLang's native ``POST /generate``: the cheapest path (no server-side chat template or OpenAI layer).

Conversations are rendered client-side with the model's chat template (``tokenizer``); with
``save_token_ids`` and a tokenizer the prompt is tokenised client-side and sent as ``input_ids``, so the
recorded prompt ids are exactly the ids the server consumed; the server's ``output_ids`` are the completion ids.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tokenmill.backends.base import Backend, BackendOptions
from tokenmill.backends.render import PromptRenderer
from tokenmill.errors import MisconfiguredError
from tokenmill.records import Generation, Prompt


def _ids(value: Any) -> list[int] | None:
    return [int(x) for x in value] if isinstance(value, list) else None


class SGLangGenerate(Backend):
    """``POST /generate`` with ``text`` (or ``input_ids``) and ``sampling_params``."""

    kind: ClassVar[str] = "sglang-generate"
    path: ClassVar[str] = "/generate"
    prompt_ids: ClassVar[bool] = False  # output_ids only: the prompt is tokenised client-side and sent as input_ids

    def __init__(self, options: BackendOptions) -> None:
        super().__init__(options)
        self.renderer = PromptRenderer(self.kind, options.tokenizer)
        s = options.sampling
        params: dict[str, Any] = {"max_new_tokens": s.max_tokens, "temperature": s.temperature}
        for name in ("top_p", "top_k", "stop"):
            value = getattr(s, name)
            if value is not None:
                params[name] = value
        if s.seed is not None:
            params["sampling_seed"] = s.seed
        extra = dict(s.extra_body)
        params.update(extra.pop("sampling_params", {}))
        self._common_fields: dict[str, Any] = {"sampling_params": params, **extra}  # built once per job

    def body(self, prompt: Prompt) -> dict[str, Any]:
        text = self.renderer.text(prompt)
        body = dict(self._common_fields)
        if prompt.seed is not None:  # samples: N, each sample with its own seed
            body["sampling_params"] = {**body["sampling_params"], "sampling_seed": prompt.seed}
        if self.options.save_token_ids and self.options.tokenizer:
            body["input_ids"] = self.renderer.encode(text)
        else:
            body["text"] = text
        return body

    def thinking_sent(self, prompt: Prompt) -> bool | None:
        return self.renderer.thinking_sent(prompt)

    def parse(self, obj: dict[str, Any], sent: dict[str, Any]) -> Generation:
        if "text" not in obj and "output_ids" in obj:
            raise MisconfiguredError(
                "the server answers /generate with token ids but no text: it was started with "
                "--skip-tokenizer-init; restart it without that flag"
            )
        meta = obj["meta_info"]
        finish = meta.get("finish_reason")
        reason = finish.get("type") if isinstance(finish, dict) else finish
        return Generation(
            text=obj["text"],
            finish_reason=reason,
            prompt_tokens=meta.get("prompt_tokens"),
            completion_tokens=meta.get("completion_tokens"),
            prompt_token_ids=_ids(obj.get("input_ids")) or _ids(sent.get("input_ids")),
            completion_token_ids=_ids(obj.get("output_ids")) if self.options.save_token_ids else None,
        )
