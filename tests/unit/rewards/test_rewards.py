"""Built-in rewards (math, mcq, logic, deepscaler, dapo, f1), custom reward loading and the
registry (hyrl/rewards/)."""

import dataclasses
import pickle
import sys
import textwrap
import threading
import time

import pytest

from hyrl.config.fields import RunConfig
from hyrl.rewards.base import accepted_answers
from hyrl.rewards.custom import CustomRewardError, load_custom_reward
from hyrl.rewards.dapo import DAPOReward, find_answer_line
from hyrl.rewards.deepscaler import DeepScaleRReward
from hyrl.rewards.exact_match import ExactMatchReward
from hyrl.rewards.f1 import F1Reward, normalize_answer, token_f1
from hyrl.rewards.logic import LogicReward
from hyrl.rewards.math import MathReward, find_last_boxed, find_last_number
from hyrl.rewards.mcq import MCQReward, extract_choice
from hyrl.rewards.registry import BUILTIN_REWARDS, reward_factory

# --- math --------------------------------------------------------------------------------------
# (response, label, expected reward), all with finish_reason "stop".
MATH_CASES = [
    # equivalent forms
    (r"The answer is \boxed{\frac{1}{2}}.", "0.5", 1.0),
    (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
    (r"\boxed{\dfrac{3}{4}}", "0.75", 1.0),
    (r"\boxed{1.5}", r"\frac{3}{2}", 1.0),
    (r"\boxed{\frac{4}{2}}", "2", 1.0),
    (r"\boxed{3.0}", "3", 1.0),
    (r"\boxed{1,000}", "1000", 1.0),
    (r"\boxed{\$18.90}", "18.90", 1.0),  # an escaped dollar is a price, not a math delimiter
    (r"It costs \$5", "5", 1.0),
    (r"\boxed{1+2x}", "2x+1", 1.0),
    (r"\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
    (r"\boxed{x=2}", "2", 1.0),  # an assignment counts as its value
    (r"\boxed{2^{1/2}}", r"\sqrt{2}", 1.0),
    (r"\boxed{\frac{1}{2}\sqrt{3}}", r"\frac{\sqrt{3}}{2}", 1.0),
    (r"so 50 \sqrt{2} / 10 = \boxed{5\sqrt{2}}", r"5\sqrt{2}", 1.0),
    (r"\boxed{\{2, 1\}}", r"\{1,2\}", 1.0),  # sets ignore order
    (r"\boxed{12 \text{ apples}}", "12", 1.0),  # a unit after the number is dropped
    # negative numbers
    (r"\boxed{-7}", "-7", 1.0),
    ("The temperature is -7 degrees.", "-7", 1.0),
    ("10-3", "3", 1.0),  # a binary minus is not a sign
    ("x - 4", "4", 1.0),
    (r"\boxed{7}", "-7", 0.0),
    # percentages: math-verify is lenient both ways
    (r"\boxed{50\%}", "0.5", 1.0),
    ("about 50% of them", "0.5", 1.0),
    ("about 50% of them", "50", 1.0),  # 50% also equals 50 for math-verify
    # the last number when nothing is boxed
    ("5 + 7 = 12", "12", 1.0),
    ("She had 3 and now has 2.50 dollars", "2.5", 1.0),
    ("so it is 1/2", "0.5", 1.0),
    ("We sold 1,000 apples", "1000", 1.0),
    (r"It is $\frac{1}{2}$", "0.5", 0.0),  # a LaTeX fraction outside a box is not a number: 2
    ("12 then 13", "12", 0.0),  # the last number wins
    # the last box wins over earlier boxes and over later numbers
    (r"\boxed{3} no wait, \boxed{4}", "4", 1.0),
    (r"\boxed{3} no wait, \boxed{4}", "3", 0.0),
    (r"\boxed{12} since 3 * 4 = 12 and 5 > 2", "12", 1.0),
    (r"\fbox{7}", "7", 1.0),
    (r"\boxed{\boxed{7}}", "7", 1.0),
    # wrong answers
    (r"\boxed{13}", "12", 0.0),
    (r"\boxed{\frac{1}{3}}", "0.5", 0.0),
    (r"\boxed{x}", "y", 0.0),
    (r"\boxed{2x+2}", "2x+1", 0.0),
    # malformed output
    (r"\boxed{3", "3", 0.0),  # an unclosed box, no fallback to the number 3
    (r"\boxed{}", "0", 0.0),
    ("", "0", 0.0),
    ("I do not know.", "3", 0.0),
    ("%%$$}{", "0", 0.0),
    (r"\boxed{1/0}", "0", 0.0),
    # math-verify differs from a person here (kept to document what the reward does):
    (r"\boxed{\text{12 apples}}", "12", 0.0),  # the whole \text{} is parsed as a symbol
    (r"\boxed{3.14159}", r"\pi", 0.0),  # compared to 6 decimals: 3.14159 != 3.141593
    (r"\boxed{0.333}", r"\frac{1}{3}", 0.0),  # likewise; 0.3333333 would pass
]


@pytest.mark.parametrize("response,label,expected", MATH_CASES)
def test_math_reward_table(response, label, expected):
    assert MathReward()(response, label, "stop") == expected


def test_math_table_is_at_least_30_cases():
    assert len(MATH_CASES) >= 30


def test_math_response_cut_by_length_scores_0_unless_truncated_rewarded():
    assert MathReward()(r"\boxed{12} and then more", "12", "length") == 0.0
    assert MathReward(reward_truncated=True)(r"\boxed{12} and then", "12", "length") == 1.0


def test_math_without_number_fallback_needs_a_box():
    reward = MathReward(fallback_to_last_number=False)
    assert reward("5 + 7 = 12", "12", "stop") == 0.0
    assert reward(r"\boxed{12}", "12", "stop") == 1.0


def test_math_extractors():
    assert find_last_boxed(r"a \boxed{\frac{1}{2}} b \boxed{x^{2}}") == ("x^{2}", False)
    assert find_last_boxed(r"\boxed{1} \boxed{2") == (None, True)
    assert find_last_boxed("no box") == (None, False)
    assert find_last_number("is -3") == "-3"
    assert find_last_number("(a+b) - 3") == "3"
    assert find_last_number("none") is None


def test_math_label_that_cannot_be_parsed_raises():
    with pytest.raises(ValueError, match="cannot parse the label"):
        MathReward()(r"\boxed{1}", "", "stop")


def test_math_pathological_answer_scores_0_within_the_budget():
    # Comparing 9^(9^(9^9)) with 3 makes sympy evaluate the power tower: > 5 minutes unbounded.
    reward = MathReward(timeout_s=0.5)
    start = time.monotonic()
    assert reward(r"\boxed{9^{9^{9^{9}}}}", "3", "stop") == 0.0
    assert time.monotonic() - start < 2.0
    assert reward(r"\boxed{3}", "3", "stop") == 1.0  # the timer is disarmed and reusable


def test_math_budget_restores_the_callers_alarm():
    import signal

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(True))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        assert MathReward(timeout_s=1.0)(r"\boxed{2}", "2", "stop") == 1.0
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25.0 < remaining <= 30.0 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_math_reward_works_off_the_main_thread():
    # math-verify's own signal.alarm timeouts raise ValueError off the main thread; ours are off.
    results = []
    thread = threading.Thread(
        target=lambda: results.append(
            (
                MathReward()(r"\boxed{\frac{1}{2}}", "0.5", "stop"),
                MathReward()(r"\boxed{3}", "4", "stop"),
            )
        )
    )
    thread.start()
    thread.join(timeout=30)
    assert results == [(1.0, 0.0)]


# --- mcq ---------------------------------------------------------------------------------------
MCQ_CASES = [
    ("Answer: B", "B", 1.0),
    ("answer: b", "B", 1.0),
    ("(b)", "B", 1.0),
    ("B", "b", 1.0),  # label case does not matter
    (r"\boxed{C}", "C", 1.0),
    (r"\boxed{\text{C}}", "C", 1.0),
    ("The answer is D.", "D", 1.0),
    ("**Answer:** B", "B", 1.0),
    ("The correct option is E", "E", 1.0),
    ("The answer is option J", "J", 1.0),
    ("I pick (b) because it is a metal.", "B", 1.0),
    ("First I thought the answer is A. Actually the answer is C.", "C", 1.0),  # the last wins
    ("Answer: C\n" r"\boxed{D}", "D", 1.0),
    ("The answer is A, because (b) is wrong", "A", 1.0),
    ("The answer is B, not C", "B", 1.0),
    ("The answer is D.", "C", 0.0),
    ("The answer is B or C", "B", 0.0),  # conflicting letters in the final answer
    ("Answer: A, C", "A", 0.0),
    (r"\boxed{B, D}", "B", 0.0),
    ("(a) or (c)", "A", 0.0),
    ("The answer is a trick question", "A", 0.0),  # a lower-case bare "a" is a word
    ("The answer is K", "K", pytest.raises),  # K is not a choice letter: a bad label
    ("I am not sure.", "A", 0.0),
]


@pytest.mark.parametrize("response,label,expected", MCQ_CASES)
def test_mcq_reward_table(response, label, expected):
    if expected is pytest.raises:
        with pytest.raises(ValueError, match="one letter A-J"):
            MCQReward()(response, label, "stop")
    else:
        assert MCQReward()(response, label, "stop") == expected


def test_mcq_extract_choice_gives_none_when_undecided():
    assert extract_choice("The answer is B or C") is None
    assert extract_choice("nothing") is None
    assert extract_choice("The answer is (c).") == "C"


def test_mcq_response_cut_by_length_scores_0():
    assert MCQReward()("Answer: B", "B", "length") == 0.0
    assert MCQReward(reward_truncated=True)("Answer: B", "B", "length") == 1.0


# --- logic -------------------------------------------------------------------------------------
KNIGHTS = '{"alice": "knight", "bob": "knave"}'
ORDER = '["amy", "ben", "cal"]'
LOGIC_CASES = [
    ('So {"alice": "knight", "bob": "knave"}', KNIGHTS, 1.0),
    ('{"Bob": " KNAVE", "Alice": "Knight"}', KNIGHTS, 1.0),  # keys/values case-folded, any order
    (r'\boxed{{"alice": "knight", "bob": "knave"}}', KNIGHTS, 1.0),
    (
        'Try {"alice": "knave", "bob": "knave"}. No: {"alice": "knight", "bob": "knave"}',
        KNIGHTS,
        1.0,
    ),
    (
        '{"alice": "knight", "bob": "knave"} ... wait, {"alice": "knave", "bob": "knight"}',
        KNIGHTS,
        0.0,
    ),
    ('{"alice": "knight"}', KNIGHTS, 0.0),  # a missing key
    ('{"alice": "knight", "bob": "knave", "cy": "knave"}', KNIGHTS, 0.0),  # an extra key
    ("{'alice': 'knight', 'bob': 'knave'}", KNIGHTS, 0.0),  # not JSON (single quotes)
    ("Alice is a knight and Bob is a knave.", KNIGHTS, 0.0),  # no structured answer
    ('Order: ["Amy", "Ben", "Cal"]', ORDER, 1.0),
    ('Order: ["cal", "ben", "amy"]', ORDER, 0.0),  # list order matters
    ('{"order": ["amy", "ben", "cal"]}', ORDER, 0.0),  # the nested list is not the answer
    ("[2, 4, 7, 9]", "[2, 4, 7, 9]", 1.0),
    ('["2", "4", "7", "9"]', "[2, 4, 7, 9]", 0.0),  # strings are not numbers
    ('{"q_lit": 1}', '{"q_lit": true}', 0.0),  # nor are booleans
    ('["amy", "ben", "cal"', ORDER, 0.0),  # unclosed
]


@pytest.mark.parametrize("response,label,expected", LOGIC_CASES)
def test_logic_reward_table(response, label, expected):
    assert LogicReward()(response, label, "stop") == expected


def test_logic_label_must_be_json_object_or_list():
    with pytest.raises(ValueError, match="JSON object or list"):
        LogicReward()("[1]", "knight", "stop")


def test_logic_response_cut_by_length_scores_0():
    assert LogicReward()(ORDER, ORDER, "length") == 0.0


def test_logic_deep_brackets_return_quickly():
    start = time.monotonic()
    assert LogicReward()("[" * 100_000, ORDER, "stop") == 0.0
    assert LogicReward()("[1, " * 5_000, ORDER, "stop") == 0.0
    assert time.monotonic() - start < 5.0


# --- deepscaler -------------------------------------------------------------------------------
# (response, label, expected reward), all with finish_reason "stop". Cases marked "slime test"
# are the examples of THUDM/slime tests/test_rm_deepscaler.py, where slime's reward gives the
# same score; "slime: N" marks where hyrl differs on purpose (docs/recipes.md, "Reward functions").
QUARTIC = "$x^{4}-2 x^{3}-13 x^{2}+14 x+24$"
DEEPSCALER_CASES = [
    # the solution is after the last </think> (else ###Response); a box in the thinking is ignored
    (r"Let me reconsider. \boxed{99}</think>Final: \boxed{42}", "42", 1.0),  # slime test
    (r"Scratch work \boxed{wrong}###Response\boxed{42}", "42", 1.0),  # slime test
    (r"\boxed{42}", "42", 0.0),  # slime test: no marker, no answer
    (r"a \boxed{41}</think>b</think>\boxed{42}", "42", 1.0),
    (r"</think>\boxed{42}###Response\boxed{41}", "42", 0.0),  # </think> is looked for first
    (r"x###Response\boxed{41}###Response\boxed{42}", "42", 1.0),  # slime: 0 (the first marker)
    # the last box of the solution; no number fallback
    ("plain</think>no box here", "42", 0.0),  # slime test
    ("</think> so it is 42", "42", 0.0),
    (r"</think>\boxed{41} no, \boxed{42}", "42", 1.0),
    (r"</think>\boxed{42", "42", 0.0),  # unclosed
    (r"</think>\boxed{}", "0", 0.0),
    (r"</think>\fbox{42}", "42", 1.0),  # slime: 0 (its remove_boxed wants \boxed{)
    # labels: boxed, numeric text, several answers (a JSON list of strings)
    (r"</think>\boxed{42}", r"\boxed{42}", 1.0),  # slime test
    (r"</think>\boxed{42}", "42.0", 1.0),  # slime test (a float label)
    (r"</think>\boxed{43}", "42", 0.0),  # slime test
    # DeepScaleR's own example (agentica-project/rllm, rllm/rewards/math_reward.py, __main__),
    # whose label is a list of answers; slime reads a label as one answer and gives 0 to the two
    # that match here
    (
        "<think>...</think>\nThe answer is \\boxed{24 + 14*x + (-13)*x^2 - 2*x^3 + x^4}.",
        f'["10", "{QUARTIC}"]',
        1.0,
    ),
    (r"</think>\boxed{10}", f'["10", "{QUARTIC}"]', 1.0),
    (r"</think>\boxed{11}", f'["10", "{QUARTIC}"]', 0.0),
    # equivalence is math-verify's (slime: mathd normalisation or its sympy grader)
    (r"</think>\boxed{\frac{1}{2}}", "0.5", 1.0),  # slime test
    (r"</think>\boxed{\frac{4}{2}}", "2", 1.0),  # slime: 0 (an integer label wants an integer)
    (r"</think>\boxed{10^{6}}", "1000000", 1.0),  # slime: 0 (it does not evaluate ^{)
    (r"</think>\boxed{\sqrt{2}}", "2^{1/2}", 1.0),  # slime: 0
]


@pytest.mark.parametrize("response,label,expected", DEEPSCALER_CASES)
def test_deepscaler_reward_table(response, label, expected):
    assert DeepScaleRReward()(response, label, "stop") == expected


def test_deepscaler_response_cut_by_length_scores_0_unless_truncated_rewarded():
    # slime scores a truncated response like any other
    assert DeepScaleRReward()(r"</think>\boxed{42}", "42", "length") == 0.0
    assert DeepScaleRReward(reward_truncated=True)(r"</think>\boxed{42}", "42", "length") == 1.0


def test_deepscaler_empty_label_raises():
    # slime test_empty_label_returns_zero: slime scores 0; here it is a reported data error
    with pytest.raises(ValueError, match="deepscaler label is empty"):
        DeepScaleRReward()(r"</think>\boxed{42}", "", "stop")


def test_deepscaler_pathological_answer_scores_0_within_the_budget():
    reward = DeepScaleRReward(timeout_s=0.5)
    start = time.monotonic()
    assert reward(r"</think>\boxed{9^{9^{9^{9}}}}", "3", "stop") == 0.0
    assert time.monotonic() - start < 2.0


def test_accepted_answers_reads_a_json_list_of_strings_only():
    assert accepted_answers('["Paris", "City of Paris"]') == ["Paris", "City of Paris"]
    assert accepted_answers("[1, 2]") == ["[1, 2]"]  # numbers: one answer, an interval
    assert accepted_answers("[1, 2)") == ["[1, 2)"]  # not JSON
    assert accepted_answers("[]") == ["[]"]
    assert accepted_answers("42") == ["42"]


# --- dapo -------------------------------------------------------------------------------------
# "slime test" cases are the examples of THUDM/slime tests/test_rm_math_dapo.py where slime's
# dapo gives 1.0 for our 1.0 and -1.0 for our 0.0; "slime: N" marks a deliberate difference.
DAPO_CASES = [
    ("Long solution. Answer: 42", "42", 1.0),  # slime test
    ("Answer: 41 was a wrong guess.\nAnswer: 42", "42", 1.0),  # slime test: the last line wins
    ("Answer: 42\nAnswer: 41", "42", 0.0),
    ("just a number 42", "42", 0.0),  # slime test: no "Answer:" line
    (r"so the answer is \boxed{42}", "42", 0.0),  # a box is no answer line
    ("answer : 42", "42", 1.0),  # case-insensitive, spaces around the colon
    ("Answer:\n42", "42", 1.0),  # the answer on the next line
    ("Answer: 43", "42", 0.0),
    # the answer line, read as math (slime: Minerva normalisation, then equal strings)
    ("Answer: $42$", "42", 1.0),
    ("Answer: x = 42", "42", 1.0),  # slime test ("x = 42" normalises to "42")
    (r"Answer: \boxed{42}", "42", 1.0),  # slime test (normalisation unwraps \boxed{42})
    ("Answer: 1,234,567", "1234567", 1.0),  # slime test
    (r"Answer: 42 \text{ ways}", "42", 1.0),
    ("Answer: 42.", "42", 1.0),  # slime: -1
    ("Answer: 42.0", "42", 1.0),  # slime: -1
    (r"Answer: \frac{84}{2}", "42", 1.0),  # slime: -1
    ("**Answer:** 42", "42", 1.0),  # slime: -1 (it keeps the "**")
    ("Final Answer: $\\frac{1}{2}$", "0.5", 1.0),  # slime: -1 (it casts the label to int: 0)
    ("Answer: 2", "2.5", 0.0),  # slime: 1 (int(float("2.5")) is 2)
    ("Answer: 0.5", "1/2", 1.0),  # slime: raises ValueError (float("1/2"))
    ("Answer: 100 dollars", "100", 0.0),  # slime test: 1 (it drops "dollars"); math-verify
    # reads the word as a product of variables
]


@pytest.mark.parametrize("response,label,expected", DAPO_CASES)
def test_dapo_reward_table(response, label, expected):
    assert DAPOReward()(response, label, "stop") == expected


def test_dapo_reads_only_the_last_300_characters():
    # slime test_compute_score_only_uses_last_300_chars, with an answer line instead of a box
    filler = " filler" * 60
    assert DAPOReward()("Answer: 42\n" + filler, "42", "stop") == 0.0
    assert DAPOReward()(filler + "\nAnswer: 42", "42", "stop") == 1.0
    line = "Answer: 42\n"  # 11 characters
    assert find_answer_line(line + "x" * 289) == "42"  # 300 characters: the whole line is read
    assert find_answer_line("earlier text " + line + "x" * 289) == "42"
    assert find_answer_line(line + "x" * 290) is None  # the "A" falls outside the tail


def test_dapo_response_cut_by_length_scores_0_unless_truncated_rewarded():
    assert DAPOReward()("Answer: 42", "42", "length") == 0.0
    assert DAPOReward(reward_truncated=True)("Answer: 42", "42", "length") == 1.0


def test_dapo_empty_label_raises():
    with pytest.raises(ValueError, match="dapo label is empty"):
        DAPOReward()("Answer: 42", " ", "stop")


# --- f1 ---------------------------------------------------------------------------------------
# Normalisation and token F1 with the examples of THUDM/slime tests/test_rm_f1.py; slime's
# f1_score gives the same numbers on them.
@pytest.mark.parametrize(
    "raw,expected",
    [
        ("The Quick Brown Fox.", "quick brown fox"),
        ("An apple, a day", "apple day"),
        ("HELLO   WORLD", "hello world"),
        ("a.b,c!", "abc"),  # punctuation removed before articles, so "a.b,c" is one word
        ("", ""),
        ("the", ""),
    ],
)
def test_f1_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


@pytest.mark.parametrize(
    "answer,label,expected",
    [
        ("Paris is the capital", "Paris is the capital", 1.0),
        ("the brown fox", "a quick brown fox", 0.8),  # P = 2/2, R = 2/3, F1 = 2PR/(P+R)
        ("apple banana", "carrot date", 0.0),
        ("yes", "some other phrase", 0.0),
        ("some other phrase", "no", 0.0),
        ("noanswer", "the noanswer box", 0.0),  # token F1 would give 0.5
        ("yes", "yes", 1.0),
        ("paris paris", "paris", 2 / 3),  # shared words count once per match: P = 1/2, R = 1
    ],
)
def test_f1_token_f1(answer, label, expected):
    assert token_f1(answer, label) == pytest.approx(expected)


F1_CASES = [
    ("Paris", "Paris", 1.0),
    ("The city of Paris.", "Paris", 0.5),  # P = 1/3 (city, of, paris), R = 1
    # the last box, with \text{} unwrapped, is the answer (slime: the whole response, 0 here)
    (r"It is France's capital, so \boxed{Paris}", "Paris", 1.0),
    (r"\boxed{Lyon} no, \boxed{\text{Paris}}", "Paris", 1.0),
    (r"\boxed{Paris", "Paris", 0.0),  # unclosed
    (r"\boxed{}", "Paris", 0.0),
    # a JSON list of strings: the best F1 over its answers (SQuAD's max over ground truths); slime
    # scores against the JSON text itself: 0.857, 0.4, 0.0
    ("City of Paris", '["Paris", "City of Paris"]', 1.0),
    ("the city", '["Paris", "City of Paris"]', 0.5),  # against "city of paris": P = 1, R = 1/3
    ("Lyon", '["Paris", "City of Paris"]', 0.0),
]


@pytest.mark.parametrize("response,label,expected", F1_CASES)
def test_f1_reward_table(response, label, expected):
    assert F1Reward()(response, label, "stop") == pytest.approx(expected)


def test_f1_response_cut_by_length_scores_0_unless_truncated_rewarded():
    assert F1Reward()("Paris", "Paris", "length") == 0.0
    assert F1Reward(reward_truncated=True)("Paris", "Paris", "length") == 1.0


@pytest.mark.parametrize("label", ["", "the", "?", '["Paris", "an"]'])
def test_f1_label_without_words_raises(label):
    with pytest.raises(ValueError, match="no words after normalisation"):
        F1Reward()("Paris", label, "stop")


# --- custom rewards ----------------------------------------------------------------------------
@pytest.fixture
def reward_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(
        textwrap.dedent("""
        def score(response_text, label, finish_reason):
            return float(response_text == label)

        NOT_CALLABLE = 3
    """)
    )
    (tmp_path / "broken_rewards.py").write_text("import no_such_package_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_rewards"
    for name in ("my_rewards", "broken_rewards"):
        sys.modules.pop(name, None)


def test_custom_reward_loads_the_function(reward_module):
    fn = load_custom_reward("my_rewards:score")
    assert fn("7", "7", "stop") == 1.0


@pytest.mark.parametrize(
    "path,message",
    [
        ("my_rewards.score", "is not module:function"),
        ("my_rewards:", "is not module:function"),
        (
            "no_such_module_xyz:score",
            "cannot import module 'no_such_module_xyz'.*ModuleNotFoundError",
        ),
        ("broken_rewards:score", "cannot import.*No module named 'no_such_package_xyz'"),
        ("my_rewards:missing", "has no attribute 'missing'.*defines .*'score'"),
        ("my_rewards:NOT_CALLABLE", "is a int, not callable"),
    ],
)
def test_custom_reward_errors_name_the_flag(reward_module, path, message):
    with pytest.raises(CustomRewardError, match="--custom-rm-path") as info:
        load_custom_reward(path)
    assert info.match(message)


# --- what every built-in shares (hyrl/rewards/base.py) ------------------------------------------
@pytest.mark.parametrize(
    "cls,response,label",
    [
        (ExactMatchReward, "42", "42"),
        (MathReward, r"\boxed{42}", "42"),
        (MCQReward, "Answer: B", "B"),
        (LogicReward, '{"a": 1}', '{"a": 1}'),
        (DeepScaleRReward, r"</think>\boxed{42}", "42"),
        (DAPOReward, "Answer: 42", "42"),
        (F1Reward, "Paris", "Paris"),
    ],
)
def test_every_builtin_scores_a_cut_response_0_unless_truncated_rewarded(cls, response, label):
    assert cls()(response, label, "stop") == 1.0
    assert cls()(response, label, "length") == 0.0
    assert cls(reward_truncated=True)(response, label, "length") == 1.0


@pytest.mark.parametrize("cls", [MathReward, DeepScaleRReward, DAPOReward])
@pytest.mark.parametrize("timeout_s", [0, -1.0])
def test_math_verify_rewards_refuse_a_budget_that_is_not_positive(cls, timeout_s):
    with pytest.raises(ValueError, match=f"timeout_s must be > 0, got {timeout_s}"):
        cls(timeout_s=timeout_s)


# --- registry ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rm_type,cls",
    [
        ("exact_match", ExactMatchReward),
        ("math", MathReward),
        ("mcq", MCQReward),
        ("logic", LogicReward),
        ("deepscaler", DeepScaleRReward),
        ("dapo", DAPOReward),
        ("f1", F1Reward),
    ],
)
def test_registry_factory_pickles_and_builds_the_reward(rm_type, cls):
    assert BUILTIN_REWARDS[rm_type] is cls
    factory = pickle.loads(pickle.dumps(reward_factory(rm_type, None)))
    assert isinstance(factory(), cls)


def test_every_builtin_is_an_rm_type_choice():
    (field,) = [f for f in dataclasses.fields(RunConfig) if f.name == "rm_type"]
    assert field.metadata["choices"] == tuple(BUILTIN_REWARDS)


def test_registry_custom_factory_pickles(reward_module):
    factory = pickle.loads(pickle.dumps(reward_factory(None, "my_rewards:score")))
    assert factory()("x", "x", "stop") == 1.0


def test_registry_custom_path_is_checked_at_once(reward_module):
    with pytest.raises(CustomRewardError, match="no attribute"):
        reward_factory(None, "my_rewards:missing")


@pytest.mark.parametrize(
    "rm_type,custom,message",
    [
        ("math", "my_rewards:score", "--rm-type math and --custom-rm-path my_rewards:score"),
        (None, None, "no reward function"),
        ("regex", None, "'regex' is not one of"),
    ],
)
def test_registry_rejects_bad_choices(rm_type, custom, message):
    with pytest.raises(ValueError, match=message):
        reward_factory(rm_type, custom)
