"""Prompt to text for the text-completion APIs: plain text as is, conversations through a chat template."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokenmill.errors import ConfigError
from tokenmill.records import Prompt

if TYPE_CHECKING:
    from tokenmill.backends.templating import ChatTemplater


class PromptRenderer:
    """Renders prompts for ``api``; loads the tokenizer (an optional extra) only when a conversation needs it."""

    def __init__(self, api: str, tokenizer: str | None) -> None:
        self.api = api
        self.tokenizer = tokenizer
        self._templater: ChatTemplater | None = None

    def templater(self, why: str) -> ChatTemplater:
        """The chat templater, created on first use; without a tokenizer path a ConfigError says what to set."""
        if self._templater is None:
            if not self.tokenizer:
                raise ConfigError(
                    f"api {self.api} {why}: set `tokenizer:` to the model's tokenizer directory "
                    "(pip install 'tokenmill[tokenizer]'), or use api: openai-chat"
                )
            from tokenmill.backends.templating import ChatTemplater

            self._templater = ChatTemplater(self.tokenizer)
        return self._templater

    def text(self, prompt: Prompt) -> str:
        """The prompt as one string."""
        if prompt.messages is None:
            return prompt.text or ""
        where = prompt.source or prompt.id
        return self.templater(f"sends text, but {where} is a conversation").render(prompt.messages, prompt.thinking)

    @staticmethod
    def thinking_sent(prompt: Prompt) -> bool | None:
        """The thinking mode the rendered text carries: the prompt's for a conversation (through the chat
        template), None for plain text (sent as it is, no template to pass it to)."""
        return prompt.thinking if prompt.messages is not None else None

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with the model's tokenizer."""
        return self.templater("needs the tokenizer to send token ids").encode(text)
