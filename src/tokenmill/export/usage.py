"""The tokenizer checked against the servers' own counts: a row's rendered token counts beside the usage the
server reported for the same answer (``completion_tokens``, and ``prompt_tokens`` where the row's context is one
request's).

A tokenizer that is not the model's renders other counts on nearly every record (a 512-token vocabulary counts an
answer the model counted in 260 tokens as ~700); the model's own differs by a few tokens at most (headers, the
end-of-turn token, an answer split otherwise than it was sampled). A record disagrees when a count differs by more
than ``usage_slack_tokens`` and ``usage_tolerance`` of the server's; more than ``usage_max_disagree`` of the records
compared is named in a warning (an error with ``--strict``), and the counts file holds the comparison. Only rows
rendered by the tokenizer are compared (rows of the server's own ids are the model's by construction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenmill.config import ExportSpec

EXAMPLES = 3  # disagreeing records shown

_SPEC = ExportSpec()


@dataclass(slots=True)
class UsageCheck:
    """Rendered token counts against the servers' usage counts, over the records compared."""

    tokenizer: str = ""
    slack: int = _SPEC.usage_slack_tokens
    tolerance: float = _SPEC.usage_tolerance
    max_share: float = _SPEC.usage_max_disagree
    compared: int = 0  # records (rows) whose counts were compared
    without_usage: int = 0  # rendered rows whose record has no usage counts
    disagree: int = 0
    rendered: int = 0  # completion tokens rendered by the tokenizer, over the compared rows
    counted: int = 0  # completion tokens the servers counted for them
    prompt_rendered: int = 0
    prompt_counted: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def _off(self, rendered: int, counted: int) -> bool:
        return abs(rendered - counted) > max(self.slack, self.tolerance * counted)

    def add(self, rid: str, rendered: int, counted: int | None, prompt: tuple[int, int | None] | None = None) -> None:
        """One row: ``rendered`` completion tokens against the server's ``counted`` (None: the record has no
        usage), and ``prompt`` (rendered, counted) where the row's context is one request's."""
        if counted is None:
            self.without_usage += 1
            return
        self.compared += 1
        self.rendered += rendered
        self.counted += counted
        off = self._off(rendered, counted)
        example: dict[str, Any] = {"id": rid, "rendered": rendered, "counted": counted}
        if prompt is not None and prompt[1] is not None:
            self.prompt_rendered += prompt[0]
            self.prompt_counted += prompt[1]
            off = off or self._off(prompt[0], prompt[1])
            example.update(prompt_rendered=prompt[0], prompt_counted=prompt[1])
        if off:
            self.disagree += 1
            if len(self.examples) < EXAMPLES:
                self.examples.append(example)

    def merge(self, other: UsageCheck) -> None:
        """Add another part's comparison (a worker's batch), its examples after this one's."""
        self.compared += other.compared
        self.without_usage += other.without_usage
        self.disagree += other.disagree
        self.rendered += other.rendered
        self.counted += other.counted
        self.prompt_rendered += other.prompt_rendered
        self.prompt_counted += other.prompt_counted
        self.examples += other.examples[: max(0, EXAMPLES - len(self.examples))]

    @property
    def share(self) -> float:
        return self.disagree / self.compared if self.compared else 0.0

    @property
    def disagrees(self) -> bool:
        """More of the compared records disagree than ``max_share`` allows."""
        return self.compared > 0 and self.share > self.max_share

    def as_dict(self) -> dict[str, Any]:
        return {
            "tokenizer": self.tokenizer,
            "compared": self.compared,
            "without_usage": self.without_usage,
            "disagree": self.disagree,
            "disagree_share": round(self.share, 4),
            "max_disagree_share": self.max_share,
            "verdict": "disagrees" if self.disagrees else ("agrees" if self.compared else "not compared"),
            "rendered_completion_tokens": self.rendered,
            "server_completion_tokens": self.counted,
            "rendered_prompt_tokens": self.prompt_rendered,
            "server_prompt_tokens": self.prompt_counted,
            "tolerance": {"tokens": self.slack, "share": self.tolerance},
            "examples": list(self.examples),
        }

    def render(self) -> str:
        if not self.compared:
            return ""
        ratio = f" ({self.rendered / self.counted:.2f}x)" if self.counted else ""
        return (
            f"  token counts against the servers' usage: {self.disagree:,} of {self.compared:,} records disagree "
            f"({self.share:.1%}); {self.rendered:,} completion tokens rendered, {self.counted:,} counted{ratio}"
        )

    def warning(self) -> str:
        """What a user is told when the tokenizer disagrees (empty when it does not)."""
        if not self.disagrees:
            return ""
        ratio = f" ({self.rendered / self.counted:.2f}x)" if self.counted else ""
        shown = "; ".join(
            f"{e['id']}: {e['rendered']:,} rendered, {e['counted']:,} counted"
            + (f" (prompt {e['prompt_rendered']:,} vs {e['prompt_counted']:,})" if "prompt_rendered" in e else "")
            for e in self.examples
        )
        return (
            f"the tokenizer {self.tokenizer} disagrees with the servers' token counts on {self.disagree:,} of "
            f"{self.compared:,} records ({self.share:.1%}, more than the {self.max_share:.1%} allowed): "
            f"{self.rendered:,} completion tokens rendered where the servers counted {self.counted:,}{ratio}; "
            f"e.g. {shown}. It is likely not the model's tokenizer: pass the model's own with --tokenizer DIR "
            "(or run the job with save_token_ids: true)"
        )
