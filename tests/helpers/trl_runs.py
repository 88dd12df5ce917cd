"""One run's record as tools/bench_vs_trl.py measures it (hyrl or TRL, one seed), with the
fields its report and `make bench`'s table read: shared by the tools' unit tests."""


def comparison_run(framework, seed, time_s, rate, stage_share=None):
    """time_s None: the run never reached the target."""
    return {
        "framework": framework,
        "seed": seed,
        "reached": time_s is not None,
        "steps_to_target": None if time_s is None else 100,
        "samples_to_target": None,
        "time_to_target_s": time_s,
        "steps": 100,
        "samples": 12800,
        "elapsed_s": 10.0,
        "responses_per_s": rate,
        "final_window_reward": 0.9,
        "peak_rss_mib": 500.0,
        "process_s": 20.0,
        "stage_share": {} if stage_share is None else stage_share,
        "run_dir": None,
    }
