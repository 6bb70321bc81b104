"""analysis.quality (normalisation, correctness, F1, intervals, retention, verdict), the bundled
prompt set, and collectors.quality_probe against an in-process httpx.MockTransport."""

from __future__ import annotations

import asyncio
import hashlib
import json
from importlib import resources

import httpx
import pytest

from analysis import quality as q
from collectors import quality_probe
from errors import ConfigError
from sim.text import token_stream

# --- normalisation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is: Paris.\nMore text", "answer is paris"),  # first line, article, punct.
        ("\n\n   42  \n", "42"),  # the first non-empty line
        ("An apple a day", "apple day"),  # articles as whole words only
        ("Theatre", "theatre"),  # ... not inside words
        ("[1,2]", "1 2"),  # punctuation becomes a space:
        ("[1, 2]", "1 2"),  # both spellings compare equal
        ("“tac”", "tac"),  # Unicode quotes are punctuation too
        ("  lots   of\tspace ", "lots of space"),
        ("", ""),
        (None, ""),
    ],
)
def test_normalise(text: str | None, expected: str) -> None:
    assert q.normalise(text) == expected


def test_normalise_keeps_case_when_asked() -> None:
    assert q.normalise("The BLUE.", keep_case=True) == "BLUE"
    assert q.normalise("The BLUE.") == "blue"


# --- correctness: equal, or contained as a whole-word sequence ---------------------------------


@pytest.mark.parametrize(
    ("answer", "accepted", "expected"),
    [
        ("Paris", ["Paris"], True),  # equal
        ("paris.", ["Paris"], True),  # equal after normalisation
        ("The capital of France is Paris.", ["Paris"], True),  # contained
        ("Parisian", ["Paris"], False),  # not a whole word
        ("Sure: green apple!", ["green apple"], True),  # a contained sequence
        ("apple green", ["green apple"], False),  # order matters
        ("green and apple", ["green apple"], False),  # contiguity matters
        ("I think\nParis", ["Paris"], False),  # first line only
        ("eight legs", ["8", "eight"], True),  # any accepted answer
        ("", ["Paris"], False),
        (None, ["Paris"], False),  # a failed request
        ("12", ["1"], False),  # numbers are whole words, not digits
        ("1 + 1 = 2", ["2"], True),  # lenient: shown working still counts
    ],
)
def test_is_correct(answer: str | None, accepted: list[str], expected: bool) -> None:
    assert q.is_correct(answer, accepted) is expected


def test_is_correct_case_sensitive() -> None:
    assert q.is_correct("BLUE", ["BLUE"], case_sensitive=True)
    assert q.is_correct("The word is BLUE.", ["BLUE"], case_sensitive=True)
    assert not q.is_correct("blue", ["BLUE"], case_sensitive=True)
    assert q.is_correct("blue", ["BLUE"])  # without the flag, case is ignored


def test_agreement() -> None:
    assert q.agrees("Paris.", "paris")
    assert q.agrees("The Paris", "paris")
    assert not q.agrees("Paris", "Lyon")
    assert not q.agrees(None, None)  # two failures are not an agreement
    assert not q.agrees("Paris", None)


# --- token-overlap F1 --------------------------------------------------------------------------


def test_token_f1() -> None:
    assert q.token_f1("Paris", "paris.") == 1.0
    assert q.token_f1("Paris", "Lyon") == 0.0
    # "paris france" vs "paris": 1 common token; precision 1/2, recall 1/1 →
    # F1 = 2 · 0.5 · 1 / (0.5 + 1) = 1 / 1.5 = 0.6667
    assert q.token_f1("Paris, France", "Paris") == pytest.approx(2 / 3)
    # multiset overlap: "a b b" (articles aside: "x y y") vs "x y": common = min counts = 1 + 1
    # = 2; precision 2/3, recall 2/2 → F1 = 2 · (2/3) · 1 / (2/3 + 1) = (4/3) / (5/3) = 0.8
    assert q.token_f1("x y y", "x y") == pytest.approx(0.8)
    assert q.token_f1("", "") == 1.0  # both empty
    assert q.token_f1("", "Paris") == 0.0
    assert q.token_f1(None, "Paris") == 0.0  # a failed side
    assert q.token_f1(None, None) == 0.0


# --- Wilson intervals, against hand-computed values --------------------------------------------


def test_wilson_hand_computed() -> None:
    # z = 1.959964, z² = 3.841459.
    # 8 of 10: p = 0.8; z²/n = 0.3841459; denom = 1.3841459;
    #   centre = (0.8 + 3.841459/20) / 1.3841459 = 0.9920730 / 1.3841459 = 0.716739
    #   half = 1.959964 / 1.3841459 · √(0.8·0.2/10 + 3.841459/400)
    #        = 1.415999 · √(0.016 + 0.009604) = 1.415999 · 0.160012 = 0.226576
    #   → [0.490163, 0.943315]
    est = q.wilson(8, 10)
    assert est.value == pytest.approx(0.8)
    assert est.lo == pytest.approx(0.490163, abs=1e-5)
    assert est.hi == pytest.approx(0.943315, abs=1e-5)
    # 0 of 10: centre = 0.192073 / 1.3841459 = 0.138766; half = 1.415999 · √0.009604
    #   = 1.415999 · 0.098000 = 0.138766 → [0, 0.277532]
    est = q.wilson(0, 10)
    assert (est.value, est.lo) == (0.0, 0.0)
    assert est.hi == pytest.approx(0.277532, abs=1e-5)
    # 10 of 10 mirrors it: [1 − 0.277532, 1] = [0.722468, 1]
    est = q.wilson(10, 10)
    assert est.lo == pytest.approx(0.722468, abs=1e-5)
    assert est.hi == 1.0
    # 40 of 80: p = 0.5 is its own centre; z²/n = 0.0480182; denom = 1.0480182;
    #   half = 1.959964 / 1.0480182 · √(0.25/80 + 3.841459/25600)
    #        = 1.870161 · √(0.003125 + 0.000150057) = 1.870161 · 0.0572282 = 0.107026
    #   → [0.392974, 0.607026]
    est = q.wilson(40, 80)
    assert est.lo == pytest.approx(0.392974, abs=1e-5)
    assert est.hi == pytest.approx(0.607026, abs=1e-5)


def test_wilson_edges() -> None:
    assert q.wilson(0, 0) == q.Estimate(None)
    with pytest.raises(ValueError):
        q.wilson(3, 2)


# --- bootstrap and retention -------------------------------------------------------------------


def test_bootstrap_is_seeded() -> None:
    values = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75, 1.0]
    a, b = q.bootstrap_mean(values), q.bootstrap_mean(values)
    assert a == b  # same seed, same interval
    assert a.value == pytest.approx(sum(values) / len(values))
    assert a.lo is not None and a.hi is not None and a.value is not None
    assert a.lo < a.value < a.hi
    assert q.bootstrap_mean(values, seed=1) != a  # another seed, another draw
    assert q.bootstrap_mean([0.5] * 5) == q.Estimate(0.5, 0.5, 0.5)  # no spread
    assert q.bootstrap_mean([]) == q.Estimate(None)


def test_retention_edges() -> None:
    # reference got nothing right: undefined, not 0 and not infinite
    assert q.retention([False] * 10, [True] * 10) == q.Estimate(None)
    assert q.retention([], []) == q.Estimate(None)
    # identical results: every paired resample gives exactly 1
    same = [True, False, True, True, False, True, False, True]
    assert q.retention(same, same) == q.Estimate(1.0, 1.0, 1.0)
    # the candidate got nothing right: 0, and the interval is [0, 0]
    assert q.retention(same, [False] * 8) == q.Estimate(0.0, 0.0, 0.0)
    # 10 of 20 vs 5 of 20 → 0.5, deterministic
    ref = [True] * 10 + [False] * 10
    cand = [True] * 5 + [False] * 15
    a = q.retention(ref, cand)
    assert a.value == pytest.approx(0.5)
    assert a == q.retention(ref, cand)
    assert a.lo is not None and a.hi is not None and a.lo < 0.5 < a.hi < 1.0
    # the candidate can do better than the reference: retention above 1
    assert q.retention(cand, ref).value == pytest.approx(2.0)
    with pytest.raises(ValueError):
        q.retention([True], [True, False])


# --- scoring, summary, verdict -----------------------------------------------------------------


def _prompt(pid: str, category: str, answer: str) -> q.QualityPrompt:
    return q.QualityPrompt(pid, category, f"question {pid}", (answer,))


def test_score_records_errors_as_wrong() -> None:
    p = _prompt("x-1", "factual", "Paris")
    s = q.score(p, "Paris", "ignored", candidate_error="HTTP 500: boom")
    assert s.reference_correct and not s.candidate_correct
    assert s.candidate_answer is None and s.candidate_error == "HTTP 500: boom"
    assert not s.agree and s.similarity == 0.0


def test_summary_per_category_and_json() -> None:
    prompts = [_prompt(f"f-{i}", "factual", "Paris") for i in range(10)] + [
        _prompt(f"a-{i}", "arithmetic", "4") for i in range(10)
    ]
    scored = [q.score(p, p.answers[0], p.answers[0]) for p in prompts[:10]] + [
        q.score(p, p.answers[0], "5") for p in prompts[10:]
    ]
    s = q.summarise(scored)
    assert list(s.categories) == ["factual", "arithmetic"]  # CATEGORIES order
    assert s.category_accuracy == {"factual": (1.0, 1.0), "arithmetic": (1.0, 0.0)}
    assert s.overall.prompts == 20
    assert s.overall.retention.value == pytest.approx(0.5)
    assert s.overall.agreement.value == pytest.approx(0.5)
    assert "NOT equivalent" in s.verdict
    data = json.loads(json.dumps(s.to_dict(), allow_nan=False))
    assert data["overall"]["reference_accuracy"] == 1.0
    assert data["overall"]["candidate_accuracy_lo"] == pytest.approx(q.wilson(10, 20).lo, abs=1e-12)
    assert data["categories"]["arithmetic"]["candidate_accuracy"] == 0.0


def _figures(ref: list[bool], cand: list[bool]) -> q.QualityFigures:
    p = _prompt("p", "code", "x")
    return q.figures(
        [q.score(p, "x" if r else "y", "x" if c else "y") for r, c in zip(ref, cand, strict=True)]
    )


def test_verdicts() -> None:
    ref = [True] * 30 + [False] * 10
    same = q.verdict(_figures(ref, ref))
    assert same.startswith("candidate retains 100 % of the reference's accuracy")
    assert "within noise" in same
    worse = q.verdict(_figures(ref, [True] * 3 + [False] * 37))
    assert worse.startswith("candidate retains 10 %") and worse.endswith("NOT equivalent")
    better = q.verdict(_figures([True] * 5 + [False] * 35, [True] * 40))
    assert "better than the reference" in better
    none = q.verdict(_figures([False] * 10, [True] * 10))
    assert "retention is undefined" in none
    # a small set whose CI covers 1 is "within noise", and says the interval is wide
    small = q.verdict(_figures([True, True, False, True], [True, False, True, True]))
    assert "within noise" in small and "wide" in small


def test_select_prompts_round_robin() -> None:
    prompts = [_prompt(f"f-{i}", "factual", "x") for i in range(3)] + [
        _prompt(f"c-{i}", "code", "x") for i in range(3)
    ]
    assert [p.id for p in q.select_prompts(prompts, (), 3)] == ["f-0", "f-1", "c-0"]
    assert [p.id for p in q.select_prompts(prompts, ("code",), 2)] == ["c-0", "c-1"]
    assert len(q.select_prompts(prompts, (), None)) == 6
    assert len(q.select_prompts(prompts, (), 100)) == 6


# --- the bundled prompt set --------------------------------------------------------------------


def test_bundled_prompt_set() -> None:
    ps = quality_probe.load_prompt_set()
    raw = resources.files("seeds").joinpath("quality_prompts.toml").read_bytes()
    assert ps.sha256 == hashlib.sha256(raw).hexdigest()
    assert ps.name == "quality-v1"
    ids = [p.id for p in ps.prompts]
    assert len(ids) == len(set(ids)) == 80
    counts = {c: sum(p.category == c for p in ps.prompts) for c in q.CATEGORIES}
    assert counts == {"factual": 20, "arithmetic": 20, "instruction": 20, "code": 20}
    for p in ps.prompts:
        assert p.id.startswith(p.category + "-")
        assert p.category in q.CATEGORIES
        assert p.answers and all(q.normalise(a) for a in p.answers)
        assert "only" in p.prompt or "nothing else" in p.prompt.lower(), p.id
        # an accepted answer, given verbatim, is correct
        assert all(q.is_correct(a, p.answers, case_sensitive=p.case_sensitive) for a in p.answers)


def test_sim_text_cannot_score_by_chance() -> None:
    """No accepted answer could come out of the sim's generated text (sim/text.py): each has a
    word the sim never says."""
    sim_words = set(q.normalise("".join(token_stream(0))).split())
    ps = quality_probe.load_prompt_set()
    clashes = [
        (p.id, a) for p in ps.prompts for a in p.answers if set(q.normalise(a).split()) <= sim_words
    ]
    assert clashes == []


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[[prompts]]\ncategory="code"\nprompt="p"\nanswers=["x"]', "needs an 'id'"),
        ('[[prompts]]\nid="a"\ncategory="poetry"\nprompt="p"\nanswers=["x"]', "poetry"),
        ('[[prompts]]\nid="a"\ncategory="code"\nprompt="p"\nanswers=[]', "answers"),
        ('[[prompts]]\nid="a"\ncategory="code"\nprompt="p"\nanswers=["!"]', "answers"),
        (
            '[[prompts]]\nid="a"\ncategory="code"\nprompt="p"\nanswers=["x"]\n'
            '[[prompts]]\nid="a"\ncategory="code"\nprompt="q"\nanswers=["y"]',
            "used twice",
        ),
        ("name = 'empty'", "no [[prompts]]"),
        ("[[prompts", "not valid TOML"),
    ],
)
def test_bad_prompt_sets_are_refused(toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        quality_probe.parse_prompt_set(toml.encode(), source="t.toml")


# --- the probe, against an in-process MockTransport --------------------------------------------


def test_probe_sends_greedy_requests_and_keeps_order_and_errors() -> None:
    prompts = [_prompt(f"p-{i}", "code", str(i)) for i in range(10)]
    seen: list[dict[str, object]] = []
    in_flight = 0
    peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        body = json.loads(request.content)
        seen.append(body)
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            pid = body["messages"][0]["content"].split()[-1]  # "question p-N"
            n = int(pid.split("-")[1])
            await asyncio.sleep(0.01 * (10 - n))  # later prompts finish first
            if n == 3:
                return httpx.Response(500, text="engine on fire, key sk-secret123")
            if n == 4:
                raise httpx.ReadTimeout("slow", request=request)
            if n == 5:
                return httpx.Response(200, text="not json")
            return httpx.Response(
                200, json={"choices": [{"message": {"role": "assistant", "content": str(n)}}]}
            )
        finally:
            in_flight -= 1

    async def go() -> list[quality_probe.ProbeAnswer]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await quality_probe.probe(
                client, "http://engine", prompts, model="m", secrets=["sk-secret123"]
            )

    answers = asyncio.run(go())
    assert [a.prompt_id for a in answers] == [p.id for p in prompts]  # prompt order
    assert peak <= quality_probe.CONCURRENCY
    for body in seen:
        assert body["temperature"] == 0 and body["seed"] == 0
        assert body["max_tokens"] == 32 and body["stream"] is False and body["model"] == "m"
    by_id = {a.prompt_id: a for a in answers}
    assert by_id["p-3"].text is None and by_id["p-3"].error is not None
    assert by_id["p-3"].error.startswith("HTTP 500")
    assert "sk-secret123" not in by_id["p-3"].error  # the key is masked
    assert by_id["p-4"].error == "timeout after 60 s"
    assert by_id["p-5"].error is not None and "unreadable" in by_id["p-5"].error
    ok = [a for a in answers if a.error is None]
    assert len(ok) == 7 and all(a.text == a.prompt_id.split("-")[1] for a in ok)


def test_probe_completions_api() -> None:
    bodies: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/completions"
        assert request.url.query == b"api-version=2"
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"text": " Paris\n"}]})

    async def go() -> list[quality_probe.ProbeAnswer]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await quality_probe.probe(
                client,
                "http://engine",
                [_prompt("f-1", "factual", "Paris")],
                model="m",
                api="completions",
                query="?api-version=2",
            )

    (answer,) = asyncio.run(go())
    assert answer.text == " Paris\n" and answer.error is None
    assert bodies[0]["prompt"] == "Question: question f-1\nAnswer:"
