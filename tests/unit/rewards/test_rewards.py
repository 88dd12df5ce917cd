"""Built-in rewards (math, mcq, logic), custom reward loading and the registry (hyrl/rewards/)."""

import pickle
import sys
import textwrap
import threading
import time

import pytest

from hyrl.rewards.custom import CustomRewardError, load_custom_reward
from hyrl.rewards.exact_match import ExactMatchReward
from hyrl.rewards.logic import LogicReward
from hyrl.rewards.math import MathReward, find_last_boxed, find_last_number
from hyrl.rewards.mcq import MCQReward, extract_choice
from hyrl.rewards.registry import reward_factory

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


# --- registry ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rm_type,cls",
    [
        ("exact_match", ExactMatchReward),
        ("math", MathReward),
        ("mcq", MCQReward),
        ("logic", LogicReward),
    ],
)
def test_registry_factory_pickles_and_builds_the_reward(rm_type, cls):
    factory = pickle.loads(pickle.dumps(reward_factory(rm_type, None)))
    assert isinstance(factory(), cls)


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
