"""Writes the sample sets of `hyrl data import` in tests/data/import_samples/, one per layout
users download (docs/data.md): the real column names, types and nesting, made-up problems.

    .venv/bin/python tests/data/import_samples/make_samples.py

* dapo_sample.parquet: verl's layout as in BytedTsinghua-SIA/DAPO-Math-17k (data_source,
  prompt = one user message in DAPO's instruction, ability, reward_model = {ground_truth,
  style}, extra_info = {index}); each problem twice, as that file repeats its prompts.
* math500_sample.jsonl: HuggingFaceH4/MATH-500's test.jsonl (problem, solution, answer,
  subject, level, unique_id).
* aime_sample.parquet: Maxwell-Jia/AIME_2024 (ID, Problem, Solution, Answer as an integer).
* slime_aime_sample.jsonl: slime's zhuzilin/aime-2024 (prompt = one user message in DAPO's
  instruction, label).
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from hyrl.data.importer import DAPO_AFTER, DAPO_BEFORE

HERE = os.path.dirname(os.path.abspath(__file__))
PROBLEMS = [  # (problem, answer): made up, checkable by hand
    ("What is the remainder when $2^{10}$ is divided by $7$?", "2"),  # 1024 = 7 * 146 + 2
    ("How many positive divisors does $36$ have?", "9"),  # 36 = 2^2 3^2: 3 * 3
    ("Compute $\\dbinom{6}{2}$.", "15"),  # 6 * 5 / 2
]


def _dapo(problem: str) -> str:
    return DAPO_BEFORE + problem + DAPO_AFTER


def main() -> None:
    verl_rows = [
        {
            "data_source": "math_dapo",
            "prompt": [{"content": _dapo(problem), "role": "user"}],
            "ability": "MATH",
            "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": f"sample-{i}-{copy}"},
        }
        for copy in range(2)
        for i, (problem, answer) in enumerate(PROBLEMS)
    ]
    pq.write_table(pa.Table.from_pylist(verl_rows), os.path.join(HERE, "dapo_sample.parquet"))

    subjects = ["Number Theory", "Number Theory", "Counting & Probability"]
    with open(os.path.join(HERE, "math500_sample.jsonl"), "w", encoding="utf-8") as f:
        for i, ((problem, answer), subject) in enumerate(zip(PROBLEMS, subjects)):
            row = {
                "problem": problem,
                "solution": f"The answer is $\\boxed{{{answer}}}$.",
                "answer": answer,
                "subject": subject,
                "level": 2,
                "unique_id": f"test/sample/{i}.json",
            }
            f.write(json.dumps(row) + "\n")

    aime_rows = [
        {"ID": f"sample-{i}", "Problem": problem, "Solution": "", "Answer": int(answer)}
        for i, (problem, answer) in enumerate(PROBLEMS[:2])
    ]
    pq.write_table(pa.Table.from_pylist(aime_rows), os.path.join(HERE, "aime_sample.parquet"))

    with open(os.path.join(HERE, "slime_aime_sample.jsonl"), "w", encoding="utf-8") as f:
        for problem, answer in PROBLEMS[:2]:
            row = {"prompt": [{"content": _dapo(problem), "role": "user"}], "label": answer}
            f.write(json.dumps(row) + "\n")
    print(f"wrote the samples in {HERE}")


if __name__ == "__main__":
    main()
