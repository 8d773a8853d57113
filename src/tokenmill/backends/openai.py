"""OpenAI-compatible APIs: ``/v1/chat/completions`` and ``/v1/completions`` (SGLang, vLLM, others).

Token ids (``save_token_ids``) are asked for with the ``return_token_ids`` request field, which servers
answer under different names (docs/compat.md): the prompt's ids as ``prompt_token_ids`` on the response
(vLLM chat) or on the choice (vLLM completions, SGLang 0.5.23), the completion's as ``token_ids`` on the
choice (vLLM, SGLang completions) or ``response_token_ids`` (SGLang chat). A server that answers without
them (SGLang before mid-2026 ignores the field) is refused as misconfigured, never recorded with null ids.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tokenmill.backends.base import Backend, BackendOptions, usage_int
from tokenmill.backends.render import PromptRenderer
from tokenmill.errors import MisconfiguredError
from tokenmill.records import Generation, Message, Prompt


def _ids(value: Any) -> list[int] | None:
    return [int(x) for x in value] if isinstance(value, list) else None


class _OpenAIBase(Backend):
    def __init__(self, options: BackendOptions) -> None:
        super().__init__(options)
        common: dict[str, Any] = {"model": options.model, **self.sampling_fields()}
        if options.save_token_ids:
            common["return_token_ids"] = True
        common.update(options.sampling.extra_body)
        self._common_fields = common  # the same for every request: built once, copied per body

    def _common(self, prompt: Prompt) -> dict[str, Any]:
        body = dict(self._common_fields)
        if prompt.seed is not None:  # samples: N, each sample with its own seed
            body["seed"] = prompt.seed
        return body

    def _token_ids(self, obj: dict[str, Any], choice: dict[str, Any]) -> tuple[list[int] | None, list[int] | None]:
        """The prompt and completion ids, when asked for; MisconfiguredError when the server left them out."""
        if not self.options.save_token_ids:
            return None, None
        prompt_ids = _ids(obj.get("prompt_token_ids")) or _ids(choice.get("prompt_token_ids"))
        completion_ids = _ids(choice.get("token_ids"))
        if completion_ids is None:
            completion_ids = _ids(choice.get("response_token_ids"))
        if prompt_ids is None or completion_ids is None:
            raise MisconfiguredError(
                f"save_token_ids is on, but the server answered {self.path} without token ids (it ignores "
                "return_token_ids: SGLang before 0.5.23 does). Use api: sglang-generate with a tokenizer, "
                "upgrade the server, or set save_token_ids: false"
            )
        return prompt_ids, completion_ids


class OpenAIChat(_OpenAIBase):
    """``POST /v1/chat/completions``: plain-text prompts are sent as one user message."""

    kind: ClassVar[str] = "openai-chat"
    path: ClassVar[str] = "/v1/chat/completions"
    server_template: ClassVar[bool] = True

    def body(self, prompt: Prompt) -> dict[str, Any]:
        messages: list[Message] = (
            prompt.messages if prompt.messages is not None else [{"role": "user", "content": prompt.text}]
        )
        body = self._common(prompt)
        body["messages"] = messages
        if prompt.thinking is not None:  # SGLang and vLLM pass chat_template_kwargs to the model's template
            kwargs = body.get("chat_template_kwargs")
            body["chat_template_kwargs"] = {
                **(kwargs if isinstance(kwargs, dict) else {}),
                "enable_thinking": prompt.thinking,
            }
        return body

    def parse(self, obj: dict[str, Any], sent: dict[str, Any]) -> Generation:
        choice = obj["choices"][0]
        message = choice["message"]
        usage = obj.get("usage")
        prompt_ids, completion_ids = self._token_ids(obj, choice)
        return Generation(
            text=message.get("content") or "",
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage_int(usage, "prompt_tokens"),
            completion_tokens=usage_int(usage, "completion_tokens"),
            reasoning_content=message.get("reasoning_content") or message.get("reasoning"),
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
        )


class OpenAICompletions(_OpenAIBase):
    """``POST /v1/completions``: text prompts; chat prompts need a client-side chat template (``tokenizer``)."""

    kind: ClassVar[str] = "openai-completions"
    path: ClassVar[str] = "/v1/completions"

    def __init__(self, options: BackendOptions) -> None:
        super().__init__(options)
        self.renderer = PromptRenderer(self.kind, options.tokenizer)

    def body(self, prompt: Prompt) -> dict[str, Any]:
        body = self._common(prompt)
        body["prompt"] = self.renderer.text(prompt)
        return body

    def thinking_sent(self, prompt: Prompt) -> bool | None:
        return self.renderer.thinking_sent(prompt)

    def parse(self, obj: dict[str, Any], sent: dict[str, Any]) -> Generation:
        choice = obj["choices"][0]
        usage = obj.get("usage")
        prompt_ids, completion_ids = self._token_ids(obj, choice)
        return Generation(
            text=choice["text"],
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage_int(usage, "prompt_tokens"),
            completion_tokens=usage_int(usage, "completion_tokens"),
            prompt_token_ids=prompt_ids,
            completion_token_ids=completion_ids,
        )
