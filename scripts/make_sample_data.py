"""Generate the bundled sample dataset: ShareGPT-style conversations for demos and trial runs.

The rows are built from the word lists and templates below with a fixed seed, so the output is the same
byte for byte on every run (a unit test checks the committed file against this script). Usage:

    python scripts/make_sample_data.py            # rewrite src/tokenmill/data/sample_sharegpt.jsonl
    python scripts/make_sample_data.py --check    # exit 1 if the committed file is stale

Each row is ``{"id": "sample-00000", "conversations": [...]}`` with an optional leading system turn, a
human turn, a gpt turn and, for about a quarter of the rows, one or two follow-up exchanges. Tasks vary
(explanations, lists, poems, summaries of long passages, code, arithmetic, emails, stories, ...) and so
do prompt and answer lengths.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

ROWS = 3000
SEED = 20240611
OUT = Path(__file__).resolve().parents[1] / "src" / "tokenmill" / "data" / "sample_sharegpt.jsonl"

Turn = dict[str, str]
Task = Callable[[random.Random], tuple[str, str]]

SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a concise assistant. Answer in as few words as possible.",
    "You are a patient teacher who explains things step by step.",
    "You are a senior software engineer. Prefer clear, idiomatic code.",
    "You are a friendly assistant who writes in plain, simple English.",
    "You are an expert editor. Keep the meaning, improve the style.",
]
CONCEPTS = [
    "photosynthesis",
    "compound interest",
    "the water cycle",
    "recursion",
    "supply and demand",
    "plate tectonics",
    "public key cryptography",
    "natural selection",
    "inflation",
    "the greenhouse effect",
    "a hash table",
    "vaccination",
    "the Doppler effect",
    "machine learning",
    "the stock market",
    "black holes",
    "the immune system",
    "version control",
    "electric circuits",
    "probability",
]
AUDIENCES = ["a five-year-old", "a high school student", "a busy manager", "a new programmer", "my grandmother"]
ACTIVITIES = [
    "learning a new language",
    "running a first marathon",
    "keeping houseplants alive",
    "saving money",
    "writing clean code",
    "sleeping better",
    "public speaking",
    "working from home",
    "cooking for one",
    "studying for exams",
    "starting a vegetable garden",
    "travelling on a budget",
    "reading more books",
]
TOPICS = [
    "the ocean at night",
    "an old lighthouse",
    "autumn leaves",
    "a city waking up",
    "a lost umbrella",
    "the first snow",
    "a cup of coffee",
    "a train leaving the station",
    "the moon",
    "a quiet library",
]
POEM_OPENERS = ["Softly comes", "Slowly fades", "I remember", "Beyond the hills,", "Still waiting for"]
POEM_IMAGES = [
    "silver in the rain",
    "a whisper on the wind",
    "older than the stones",
    "bright as morning glass",
    "folded into dusk",
    "humming like a distant bell",
    "lost and found again",
    "warm against the cold",
]
STYLES = ["a haiku", "a limerick", "free verse", "a sonnet", "a nursery rhyme"]
SUBJECTS = [
    "The committee",
    "A small team",
    "The new system",
    "Most researchers",
    "The city council",
    "Our customers",
    "The latest report",
    "Local farmers",
    "The museum",
    "Engineers at the plant",
]
VERBS = [
    "reviewed",
    "questioned",
    "improved",
    "described",
    "measured",
    "supported",
    "delayed",
    "announced",
    "tested",
    "compared",
    "rejected",
    "published",
    "expanded",
    "simplified",
    "documented",
]
OBJECTS = [
    "the budget for next year",
    "a plan to reduce waste",
    "the results of the survey",
    "a safer design",
    "the new training programme",
    "several open questions",
    "the cost of the project",
    "a shorter schedule",
    "the impact on local traffic",
    "an updated set of rules",
    "the quality of the water",
    "a pilot study",
]
CLOSERS = [
    "after a long discussion",
    "despite some objections",
    "with broad agreement",
    "for the second time",
    "ahead of the deadline",
    "in a public meeting",
    "without further comment",
    "as expected",
]
CODE_TASKS = [
    ("reverses a string", "def reverse(text: str) -> str:\n    return text[::-1]"),
    (
        "checks whether a number is prime",
        "def is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n"
        "    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n"
        "    return True",
    ),
    (
        "returns the n-th Fibonacci number",
        "def fib(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    ),
    ("counts the words in a text", "def count_words(text: str) -> int:\n    return len(text.split())"),
    (
        "removes duplicates from a list while keeping order",
        "def dedupe(items: list) -> list:\n    return list(dict.fromkeys(items))",
    ),
    ("flattens a list of lists", "def flatten(rows: list[list]) -> list:\n    return [x for row in rows for x in row]"),
    (
        "computes the average of a list of numbers",
        "def mean(values: list[float]) -> float:\n    return sum(values) / len(values) if values else 0.0",
    ),
    (
        "checks whether a string is a palindrome",
        "def is_palindrome(text: str) -> bool:\n    s = ''.join(c.lower() for c in text if c.isalnum())\n"
        "    return s == s[::-1]",
    ),
]
PAIRS = [
    ("a virus", "a bacterium"),
    ("weather", "climate"),
    ("a list", "a tuple"),
    ("RAM", "disk storage"),
    ("speed", "velocity"),
    ("a crocodile", "an alligator"),
    ("TCP", "UDP"),
    ("baking soda", "baking powder"),
    ("an asteroid", "a comet"),
    ("a process", "a thread"),
]
CATEGORIES = {
    "planets": ["Mercury", "Venus", "Mars", "Jupiter", "Saturn", "Neptune"],
    "programming languages": ["Python", "Rust", "Go", "Haskell", "C", "Julia"],
    "musical instruments": ["violin", "piano", "trumpet", "cello", "flute", "drums"],
    "rivers": ["the Nile", "the Amazon", "the Danube", "the Mekong", "the Rhine", "the Volga"],
    "board games": ["chess", "Go", "backgammon", "checkers", "Monopoly", "Scrabble"],
}
TONES = ["polite", "friendly", "formal", "short", "apologetic"]
RECIPIENTS = ["my landlord", "a colleague", "the school", "a customer", "my manager", "the support team"]
EMAIL_SUBJECTS = [
    "a broken heater",
    "moving a meeting to Friday",
    "a late delivery",
    "asking for a day off",
    "a mistake on an invoice",
    "the results of a project",
]
REVIEWS = [
    ("The battery lasts all day and the screen is gorgeous.", "positive"),
    ("It stopped working after a week and support never replied.", "negative"),
    ("It does what it says. Nothing more, nothing less.", "neutral"),
    ("Best purchase I have made this year, highly recommended!", "positive"),
    ("The food was cold and the waiter was rude.", "negative"),
    ("Delivery took four days, which was as promised.", "neutral"),
]
CHARACTERS = ["a tired robot", "a curious cat", "an old fisherman", "a young inventor", "a lonely dragon"]
GOALS = ["wants to see the sea", "loses a key", "learns to bake bread", "finds a hidden door", "makes a new friend"]
FOLLOW_UPS = [
    "Can you make that shorter?",
    "Thanks! Can you give me a concrete example?",
    "Could you explain the last part in more detail?",
    "Now summarize your answer in one sentence.",
    "Can you rewrite it in a more formal tone?",
]


def sentence(rng: random.Random) -> str:
    """One plausible news-like sentence from the word lists."""
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(CLOSERS)}."


def paragraph(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(lo, hi)))


def explain(rng: random.Random) -> tuple[str, str]:
    concept, audience = rng.choice(CONCEPTS), rng.choice(AUDIENCES)
    answer = (
        f"Here is a simple way to think about {concept}, for {audience}. "
        f"Imagine a system where each part depends on the others. {paragraph(rng, 1, 4)} "
        f"In short, {concept} is about how small steps add up to a larger effect."
    )
    return f"Explain {concept} to {audience}.", answer


def tips(rng: random.Random) -> tuple[str, str]:
    n, activity = rng.randint(3, 7), rng.choice(ACTIVITIES)
    verbs = ["Start", "Plan", "Practice", "Track", "Rest", "Ask for", "Review", "Keep"]
    items = [f"{i}. {rng.choice(verbs)} {rng.choice(OBJECTS)} regularly." for i in range(1, n + 1)]
    return f"Give me {n} tips for {activity}.", f"Here are {n} tips for {activity}:\n" + "\n".join(items)


def poem(rng: random.Random) -> tuple[str, str]:
    topic, style = rng.choice(TOPICS), rng.choice(STYLES)
    lines = [f"{rng.choice(POEM_OPENERS)} {topic}, {rng.choice(POEM_IMAGES)}" for _ in range(rng.randint(3, 8))]
    return f"Write {style} about {topic}.", "\n".join(lines)


def summarize(rng: random.Random) -> tuple[str, str]:
    k = rng.randint(1, 3)
    text = paragraph(rng, 3, 12)
    summary = " ".join(text.split(". ")[:k]).rstrip(".") + "."
    return f"Summarize the following text in {k} sentence{'s' if k > 1 else ''}:\n\n{text}", summary


def code(rng: random.Random) -> tuple[str, str]:
    task, body = rng.choice(CODE_TASKS)
    return f"Write a Python function that {task}.", f"Here is one way to do it:\n\n```python\n{body}\n```"


def compare(rng: random.Random) -> tuple[str, str]:
    a, b = rng.choice(PAIRS)
    return (
        f"What is the difference between {a} and {b}?",
        f"The main difference is in how they work. {a.capitalize()} and {b} share some features, "
        f"but they differ in structure and in use. {paragraph(rng, 1, 3)}",
    )


def arithmetic(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(12, 999), rng.randint(2, 99)
    op = rng.choice(["+", "-", "*"])
    result = a + b if op == "+" else a - b if op == "-" else a * b
    return f"What is {a} {op} {b}? Show your work.", f"We compute {a} {op} {b} step by step. The result is {result}."


def name_three(rng: random.Random) -> tuple[str, str]:
    category = rng.choice(sorted(CATEGORIES))
    picks = rng.sample(CATEGORIES[category], 3)
    return f"Name three {category}.", f"Three {category}: {picks[0]}, {picks[1]} and {picks[2]}."


def email(rng: random.Random) -> tuple[str, str]:
    tone, recipient, subject = rng.choice(TONES), rng.choice(RECIPIENTS), rng.choice(EMAIL_SUBJECTS)
    body = (
        f"Subject: {subject.capitalize()}\n\nHello,\n\nI am writing about {subject}. "
        f"{paragraph(rng, 1, 3)}\n\nBest regards"
    )
    return f"Draft a {tone} email to {recipient} about {subject}.", body


def sentiment(rng: random.Random) -> tuple[str, str]:
    review, label = rng.choice(REVIEWS)
    prompt = f'Classify the sentiment of this review as positive, negative or neutral: "{review}"'
    return prompt, f"The sentiment is {label}."


def story(rng: random.Random) -> tuple[str, str]:
    n, character, goal = rng.randint(3, 8), rng.choice(CHARACTERS), rng.choice(GOALS)
    opening = f"Once there was {character} who {goal}."
    return f"Write a {n}-sentence story about {character} who {goal}.", " ".join(
        [opening, paragraph(rng, n - 1, n - 1)]
    )


TASKS: list[Task] = [explain, tips, poem, summarize, code, compare, arithmetic, name_three, email, sentiment, story]


def conversation(rng: random.Random) -> list[Turn]:
    """One conversation: maybe a system turn, a first exchange, and maybe follow-ups."""
    turns: list[Turn] = []
    if rng.random() < 0.3:
        turns.append({"from": "system", "value": rng.choice(SYSTEM_PROMPTS)})
    human, gpt = rng.choice(TASKS)(rng)
    turns += [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}]
    if rng.random() < 0.25:
        for _ in range(rng.randint(1, 2)):
            turns.append({"from": "human", "value": rng.choice(FOLLOW_UPS)})
            turns.append({"from": "gpt", "value": f"Of course. {paragraph(rng, 1, 2)}"})
    return turns


def build_rows(n: int = ROWS, seed: int = SEED) -> list[dict[str, object]]:
    """The sample rows, the same for the same ``n`` and ``seed``."""
    rng = random.Random(seed)
    return [{"id": f"sample-{i:05d}", "conversations": conversation(rng)} for i in range(n)]


def render(rows: list[dict[str, object]]) -> bytes:
    """The JSONL bytes of ``rows`` (UTF-8, one object per line)."""
    return "".join(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n" for row in rows).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (default: the packaged file)")
    parser.add_argument("--check", action="store_true", help="only check that --out is up to date")
    args = parser.parse_args(argv)
    data = render(build_rows())
    if args.check:
        current = args.out.read_bytes() if args.out.exists() else b""
        if current != data:
            print(f"{args.out} is stale; run: python scripts/make_sample_data.py", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"wrote {ROWS} rows ({len(data):,} bytes) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
