"""`hyrl train` end to end through the recipe and launcher, on one and two gloo ranks."""

import json
import subprocess
import sys

import pytest
from recipe_runs import PPO_RECIPE, ROOT, records, run_recipe

REQUIRED_KEYS = {
    "step",
    "samples",
    "elapsed_s",
    "train/reward_mean",
    "train/response_len_mean",
    "train/loss",
    "actor/grad_norm",
    "actor/lr",
    "perf/rollout_s",
    "perf/reward_s",
    "perf/logprob_s",
    "perf/actor_train_s",
    "perf/weight_sync_s",
    "perf/step_s",
    "perf/rollout_tokens_per_s",
}


CRITIC_KEYS = {
    "critic/value_loss",
    "critic/explained_variance",
    "critic/grad_norm",
    "critic/lr",
    "critic/value_mean",
    "critic/optimizer_steps",
    "perf/critic_train_s",
    "perf/value_s",
}


@pytest.mark.slow
def test_three_steps_write_the_resolved_config_and_one_flushed_record_per_step(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(run_dir, "--num-steps", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["rollout_batch_size"] == 16 and config["n_samples_per_prompt"] == 8
    assert config["global_batch_size"] == 128 and config["lr"] == 3e-4
    assert config["num_steps"] == 3  # the recipe says 600; the appended flag wins
    rows = records(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["samples"] for r in rows] == [128, 256, 384]
    assert all(REQUIRED_KEYS <= set(r) for r in rows)
    assert rows[0]["elapsed_s"] < rows[1]["elapsed_s"] < rows[2]["elapsed_s"]
    assert all(0.0 <= r["train/reward_mean"] <= 1.0 for r in rows)
    # the tiny model (125k fp32 parameters, 0.5 MB) fits one default 512 MiB bucket: the sync
    # held one bucket of the whole model, never more
    model_bytes = 4 * 125_000
    assert all(
        0.9 * model_bytes < r["perf/weight_sync_peak_bytes"] < 1.1 * model_bytes for r in rows
    )


@pytest.mark.slow
def test_two_optimizer_steps_per_rollout_log_two_records_with_exact_samples(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "2",
        "--global-batch-size",
        "64",
        "--micro-batch-size",
        "16",
        "--kl-loss-coef",
        "0.01",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert [(r["rollout_step"], r["step"], r["samples"]) for r in rows] == [
        (1, 1, 64),
        (1, 2, 128),
        (2, 3, 192),
        (2, 4, 256),
    ]
    # rollout-stage metrics belong to the first optimizer step of each rollout
    assert ["train/reward_mean" in r for r in rows] == [True, False, True, False]
    assert all("actor/kl" in r for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize(
    "layout",
    [
        ("--tensor-model-parallel-size", "2", "--sequence-parallel"),
        ("--expert-model-parallel-size", "2"),
    ],
    ids=["tp2", "ep2"],
)
def test_two_gloo_ranks_train_under_tensor_and_expert_parallelism(tmp_path, layout):
    run_dir = tmp_path / "run"
    proc = run_recipe(run_dir, "--num-steps", "3", *layout, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["world_size"] == 2
    rows = records(run_dir)  # rank 0 alone writes: one record per step, not two
    assert [r["samples"] for r in rows] == [128, 256, 384]
    assert all(REQUIRED_KEYS <= set(r) for r in rows)
    # the noise scale is measured from micro-batches (TP: DP=1) or per-rank gradients (EP: DP=2)
    noise_keys = {"actor/noise_grad_sq", "actor/noise_trace_sigma"}
    step_keys = {"actor/noise_grad_sq_step", "actor/noise_trace_sigma_step"}
    assert all(noise_keys | step_keys <= set(r) for r in rows)
    # B_simple = tr(Sigma)/|G|^2 is left out of a step whose averaged |G|^2 is not positive
    assert all(("actor/noise_scale" in r) == (r["actor/noise_grad_sq"] > 0) for r in rows)
    # after one update the bias-corrected averages are that step's own estimates
    first = rows[0]
    assert first["actor/noise_grad_sq"] == pytest.approx(first["actor/noise_grad_sq_step"])
    assert first["actor/noise_trace_sigma"] == pytest.approx(first["actor/noise_trace_sigma_step"])


def test_invalid_flags_stop_before_torch_is_imported(tmp_path):
    run_dir = tmp_path / "never"
    code = (
        "import sys; from hyrl.cli import main; rc = main(['train', '--global-batch-size', '100', "
        f"'--run-dir', {str(run_dir)!r}]); print('torch' in sys.modules); sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--global-batch-size=100" in proc.stderr and "allowed" in proc.stderr
    assert proc.stdout.strip() == "False"
    assert not run_dir.exists()


def test_recipe_refuses_a_run_directory_that_already_holds_a_run(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    proc = run_recipe(run_dir, "--num-steps", "1")
    assert proc.returncode == 2
    assert "--run-dir" in proc.stderr
    assert (run_dir / "metrics.jsonl").read_text() == '{"step": 1}\n'  # untouched


def test_world_size_that_tp_does_not_divide_is_rejected_by_every_launcher_path(tmp_path):
    proc = run_recipe(
        tmp_path / "run",
        "--num-steps",
        "1",
        "--tensor-model-parallel-size",
        "2",
        "--sequence-parallel",
        nproc=1,
    )
    assert proc.returncode == 2
    assert "--tensor-model-parallel-size=2" in proc.stderr


@pytest.mark.slow
def test_log_wandb_mirrors_offline_into_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_dir = tmp_path / "run"
    proc = run_recipe(run_dir, "--num-steps", "2", "--log-wandb")
    assert proc.returncode == 0, proc.stderr[-3000:]
    offline_runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline_runs) == 1
    assert len(records(run_dir)) == 2


@pytest.mark.slow
def test_a_resumed_run_continues_its_wandb_run_and_a_fork_starts_its_own(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run_dir, ckpt = tmp_path / "run", tmp_path / "ck"
    wandb_flags = ("--log-wandb", "--wandb-team", "hyrl-team", "--wandb-group", "g1",
                   "--wandb-tags", "b128,sqrt")  # fmt: skip
    proc = run_recipe(run_dir, "--num-steps", "2", "--save", str(ckpt), *wandb_flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = run_recipe(run_dir, "--num-steps", "3", "--load", str(ckpt), *wandb_flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = json.loads((run_dir / "config.json").read_text())["run_id"]
    segments = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(segments) == 2  # one per process, offline
    assert all(p.name.endswith(f"-{run_id}") for p in segments), segments  # the same wandb run
    fork = tmp_path / "fork"
    proc = run_recipe(fork, "--num-steps", "3", "--load", str(ckpt), "--log-wandb")
    assert proc.returncode == 0, proc.stderr[-3000:]
    fork_id = json.loads((fork / "config.json").read_text())["run_id"]
    (fork_segment,) = (fork / "wandb").glob("offline-run-*")
    assert fork_id != run_id and fork_segment.name.endswith(f"-{fork_id}")


def test_alltoall_dispatcher_without_cuda_is_refused_before_any_process_group(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: alltoall is allowed")
    proc = run_recipe(
        tmp_path / "run", "--num-steps", "1", "--moe-token-dispatcher-type", "alltoall"
    )
    assert proc.returncode == 2
    assert "--moe-token-dispatcher-type=alltoall" in proc.stderr and "allowed" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_ppo_actor_and_critic_step_at_their_own_cadence(tmp_path):
    run_dir = tmp_path / "run"
    # 128 responses per rollout: actor B = 128 (1 step), critic B = 32 (4 steps); the first
    # rollout trains only the critic.
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "3",
        "--num-critic-only-steps",
        "1",
        "--critic-global-batch-size",
        "32",
        "--critic-micro-batch-size",
        "16",
        recipe=PPO_RECIPE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["critic_global_batch_size"] == 32 and config["global_batch_size"] == 128
    assert config["critic_steps_per_rollout"] == 4 and config["optimizer_steps_per_rollout"] == 1
    rows = records(run_dir)
    assert [
        (r["rollout_step"], r["step"], r["samples"], r["critic/optimizer_steps"]) for r in rows
    ] == [(1, 0, 0, 4), (2, 1, 128, 8), (3, 2, 256, 12)]
    assert "actor/grad_norm" not in rows[0]  # the actor did not move during critic warm-up
    assert all(CRITIC_KEYS <= set(r) for r in rows)
    assert all(REQUIRED_KEYS <= set(r) for r in rows[1:])
    assert all("critic/noise_scale" in r for r in rows)
    assert isinstance(rows[-1]["critic/noise_scale"], float)  # finite after 3 rollouts


@pytest.mark.slow
@pytest.mark.parametrize(
    "virtual_stages",
    [
        (),
        # 4 layers: two 1-layer chunks per rank, megatron's interleaved schedule; the
        # token-packed micro-batches are padded to a multiple of PP there
        ("--num-layers", "4", "--num-layers-per-virtual-pipeline-stage", "1"),
    ],
    ids=["1f1b", "interleaved"],
)
def test_ppo_on_two_pipeline_stages_in_bf16_with_the_distributed_optimizer(
    tmp_path, virtual_stages
):
    """PP=2: actor, critic and the KL reference through megatron's pipeline schedule (plain
    1F1B, or interleaved over virtual stages), dynamic micro-batches, bf16 and the distributed
    optimizer; the engine's log-probs equal the trainer's (the weights it got were streamed
    from both stages, chunk by chunk) within bf16 noise."""
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        *virtual_stages,
        "--num-steps",
        "3",
        "--num-critic-only-steps",
        "0",
        "--pipeline-model-parallel-size",
        "2",
        "--bf16",
        "--use-distributed-optimizer",
        "--use-dynamic-batch-size",
        "--max-tokens-per-gpu",
        "64",
        "--kl-loss-coef",
        "0.01",
        nproc=2,
        recipe=PPO_RECIPE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert [r["samples"] for r in rows] == [128, 256, 384]
    assert all(CRITIC_KEYS - {"perf/critic_train_s", "perf/value_s"} <= set(r) for r in rows)
    assert all(r["actor/skipped"] == 0.0 and r["critic/grad_norm"] > 0 for r in rows)
    # the hf engine samples in float32 from the bf16 weights it received
    assert all(r["mismatch/logprob_abs_diff_mean"] < 1e-2 for r in rows)
    # no per-micro-batch noise scale at DP = 1 under PP (1F1B interleaves micro-batches)
    assert not any("actor/noise_scale" in r for r in rows)


@pytest.mark.slow
def test_ppo_on_two_ranks_with_tp_critic_kl_penalty_and_two_actor_steps_per_rollout(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "2",
        "--num-critic-only-steps",
        "0",
        "--tensor-model-parallel-size",
        "2",
        "--sequence-parallel",
        "--global-batch-size",
        "none",
        "--num-steps-per-rollout",
        "2",
        "--kl-coef",
        "0.05",
        nproc=2,
        recipe=PPO_RECIPE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run_dir / "config.json").read_text())["global_batch_size"] == 64
    rows = records(run_dir)
    assert [(r["rollout_step"], r["step"], r["samples"]) for r in rows] == [
        (1, 1, 64),
        (1, 2, 128),
        (2, 3, 192),
        (2, 4, 256),
    ]
    firsts = [rows[0], rows[2]]  # rollout-level values sit on a rollout's first record
    assert all(CRITIC_KEYS - {"perf/critic_train_s", "perf/value_s"} <= set(r) for r in firsts)
    assert all("train/kl_penalty" in r for r in firsts)
    assert all("perf/critic_train_s" in r for r in (rows[1], rows[3]))  # timers on the last


def test_critic_flag_with_grpo_is_refused_before_any_model_is_built(tmp_path):
    proc = run_recipe(tmp_path / "run", "--num-steps", "1", "--critic-lr", "1e-3")
    assert proc.returncode == 2
    assert "--critic-lr=0.001" in proc.stderr and "gae" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def tiny_hf_dir(tmp_path_factory):
    """A local Hugging Face directory of the tiny Qwen3-MoE (random weights, no hub)."""
    import torch
    from transformers import Qwen3MoeForCausalLM

    from hyrl.models.qwen3_moe.config import TINY

    path = tmp_path_factory.mktemp("hf") / "tiny"
    torch.manual_seed(3)
    Qwen3MoeForCausalLM(TINY.to_hf_config()).save_pretrained(path)
    return path


@pytest.mark.slow
def test_critic_trunk_loads_from_a_local_hf_directory(tmp_path, tiny_hf_dir):
    proc = run_recipe(
        tmp_path / "run",
        "--num-steps",
        "2",
        "--num-critic-only-steps",
        "0",
        "--critic-load",
        str(tiny_hf_dir),
        recipe=PPO_RECIPE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(records(tmp_path / "run")) == 2


def test_critic_checkpoint_of_another_architecture_is_refused_naming_the_difference(
    tmp_path, tiny_hf_dir
):
    proc = run_recipe(
        tmp_path / "run",
        "--num-steps",
        "2",
        "--num-critic-only-steps",
        "0",
        "--critic-load",
        str(tiny_hf_dir),
        "--hidden-size",
        "32",
        recipe=PPO_RECIPE,
    )
    assert proc.returncode == 2
    assert "--critic-load=" in proc.stderr and "hidden_size: 64 in the checkpoint" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_evaluation_target_and_summary_are_recorded(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "4",
        "--eval-interval",
        "2",
        "--n-samples-per-eval-prompt",
        "2",
        "--target",
        "train/reward_mean=0.0",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    evals = [
        (r["step"], r["samples"], r["eval/num_responses"]) for r in rows if "eval/accuracy" in r
    ]
    # before training, every 2 rollout steps, and at the end; 20 held-out prompts x 2 samples
    assert evals == [(0, 0, 40), (2, 256, 40), (4, 512, 40)]
    assert rows[0]["elapsed_s"] == 0.0 and all(
        "perf/eval_s" in r for r in rows if "eval/accuracy" in r
    )
    # evaluation is off the clock, and a step's interval still holds all of its stages
    stages = (
        "perf/rollout_s",
        "perf/reward_s",
        "perf/logprob_s",
        "perf/actor_train_s",
        "perf/weight_sync_s",
    )
    for row in rows[1:]:
        assert row["perf/step_s"] >= sum(row.get(k, 0.0) for k in stages), row["step"]
        # the rest of the step is overhead (one record per rollout here)
        assert row["perf/overhead_s"] == pytest.approx(
            row["perf/step_s"] - sum(row.get(k, 0.0) for k in stages), abs=1e-9
        )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reached"] is True and summary["steps_to_target"] == 1  # reward >= 0 at once
    assert summary["samples_to_target"] == 128
    assert summary["samples"] == 512 and summary["throughput_responses_per_s"] > 0
    assert set(summary["stage_share"]) >= {"rollout", "actor_train", "logprob", "weight_sync"}
    assert 0.5 < sum(summary["stage_share"].values()) <= 1.0 + 1e-9


def test_dry_run_prints_the_resolved_configuration_and_starts_nothing(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--dry-run",
        "--rollout-batch-size",
        "64",
        "--lr",
        "none",
        "--base-lr",
        "3e-4",
        "--base-global-batch-size",
        "128",
        "--lr-scaling",
        "sqrt",
        "--global-batch-size",
        "none",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads(proc.stdout)
    assert config["global_batch_size"] == 512 and config["lr"] == pytest.approx(6e-4)
    assert not run_dir.exists()


@pytest.mark.slow
def test_batch_ramp_changes_responses_per_step_and_rederives_the_lr(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "6",
        "--batch-ramp",
        "128:512:4",
        "--lr",
        "none",
        "--base-lr",
        "3e-4",
        "--base-global-batch-size",
        "128",
        "--lr-scaling",
        "sqrt",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert [r["batch/responses_per_step"] for r in rows] == [128, 224, 320, 416, 512, 512]
    assert [r["batch/prompts_per_step"] for r in rows] == [16, 28, 40, 52, 64, 64]
    assert [r["samples"] for r in rows] == [128, 352, 672, 1088, 1600, 2112]  # cumulative, exact
    for row in rows:  # lr = 3e-4 * sqrt(B / 128)
        assert row["actor/lr"] == pytest.approx(
            3e-4 * (row["batch/responses_per_step"] / 128) ** 0.5
        )


@pytest.mark.slow
def test_sglang_engine_without_cuda_is_refused_before_any_process_group(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = run_recipe(
        tmp_path / "run", "--num-steps", "1", "--rollout-engine", "sglang", "--colocate"
    )
    assert proc.returncode == 2
    assert "--rollout-engine=sglang" in proc.stderr and "CUDA" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_hf_engines_on_ray_and_reward_workers_train_and_count_failures(tmp_path):
    """Two hf engine actors on Ray and one reward worker: the same records as in-process."""
    run_dir = tmp_path / "run"
    proc = run_recipe(
        run_dir,
        "--num-steps",
        "3",
        "--rollout-num-engines",
        "2",
        "--rollout-concurrency",
        "32",
        "--reward-num-workers",
        "1",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["samples"] for r in rows] == [128, 256, 384]
    for row in rows:
        assert REQUIRED_KEYS <= row.keys()
        assert row["train/reward_failures"] == 0 and row["train/reward_timeouts"] == 0
        assert row["perf/weight_sync_s"] > 0
        assert (row["rollout/engine_restarts"], row["rollout/resubmitted_prompts"]) == (0, 0)
    config = json.loads((run_dir / "config.json").read_text())
    assert (
        config["rollout_layout"]["num_engines"] == 2 and not config["rollout_layout"]["in_process"]
    )


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2], ids=["one_rank", "two_ep_ranks"])
def test_sglang_engine_attached_to_a_router_trains_with_disk_weight_sync(tmp_path, ranks):
    """Protocol test of the trainer's SGLang path (tests/helpers/fake_sglang_server.py plays
    router and server; it is not SGLang): generation through /generate, and after every
    optimizer step the weights go to disk and /update_weights_from_disk, between pause and
    flush + continue. Every rank writes its own shards, rank 0 the index; only the newest sync's
    directory is kept."""
    from fake_sglang_server import FakeSGLangServer
    from transformers import Qwen3MoeForCausalLM

    from hyrl.models.qwen3_moe.config import TINY
    from hyrl.rollout.sglang.receive.payload import checkpoint_named_tensors

    hf_names = checkpoint_named_tensors(Qwen3MoeForCausalLM(TINY.to_hf_config()).state_dict())
    with FakeSGLangServer(weights={name: torch_zeros_like(t) for name, t in hf_names}) as fake:
        fake.router_workers = [fake.url]
        run_dir = tmp_path / "run"
        parallel = ["--expert-model-parallel-size", "2"] if ranks == 2 else []
        proc = run_recipe(
            run_dir,
            "--num-steps",
            "2",
            "--rollout-engine",
            "sglang",
            "--sglang-router-url",
            fake.url,
            "--update-weight-transport",
            "disk",
            "--rollout-concurrency",
            "16",
            "--update-weight-buffer-size",
            str(1 << 20),
            *parallel,
            nproc=ranks,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        routes = fake.routes_called()
    rows = records(run_dir)
    assert [r["samples"] for r in rows] == [128, 256]
    assert all(r["perf/weight_sync_bytes"] > 0 and r["perf/weight_sync_buckets"] >= 1 for r in rows)
    assert routes.count("/generate") == 2 * 128 and fake.peak_in_flight <= 16
    # one sync at start-up and one per optimizer step, each paused and flushed
    syncs = [i for i, r in enumerate(routes) if r == "/update_weights_from_disk"]
    assert len(syncs) == 3
    for i in syncs:
        assert routes[i - 1] == "/pause_generation"
        assert routes[i + 1 : i + 3] == ["/flush_cache", "/continue_generation"]
    assert fake.shift != 0  # the trainer's weights replaced the fake's zeros
    assert all(0 < r["perf/weight_sync_peak_bytes"] for r in rows)
    [kept] = sorted((run_dir / "rollout_weights").iterdir())
    assert kept.name == "sync-000003"
    index = json.loads((kept / "model.safetensors.index.json").read_text())
    writers = {file.split("-")[1] for file in index["weight_map"].values()}
    shards = rows[-1]["perf/weight_sync_buckets"]  # bucket k is written by rank k % ranks
    assert writers == {f"rank{k % ranks:05d}" for k in range(shards)}
    assert sorted(set(index["weight_map"].values())) == sorted(
        p.name for p in kept.glob("*.safetensors")
    )


def torch_zeros_like(tensor):
    import torch

    return torch.zeros_like(tensor, dtype=torch.float32)


DATA_RECIPE = ROOT / "recipes" / "tiny" / "grpo_data.sh"


@pytest.mark.slow
def test_tiny_recipe_trains_from_a_jsonl_dataset_through_the_data_flags(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_recipe(run_dir, "--num-steps", "2", "--eval-interval", "2", recipe=DATA_RECIPE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = records(run_dir)
    assert [r["samples"] for r in rows if r["step"] > 0] == [128, 256]
    evals = [r for r in rows if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2]
    assert all(r["eval/arith/accuracy"] == r["eval/accuracy"] for r in evals)
    assert all(r["eval/num_responses"] == 100 for r in evals)  # every record of the file
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["task"], config["rm_type"]) == ("prompt_data", "exact_match")


def test_a_record_without_the_input_key_is_refused_before_any_process_group(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "label": "2"}\n{"question": "2+2=", "label": "4"}\n')
    proc = run_recipe(
        tmp_path / "run",
        "--num-steps",
        "1",
        "--prompt-data",
        str(bad),
        "--eval-prompt-data",
        "arith",
        str(bad),
        recipe=DATA_RECIPE,
    )
    assert proc.returncode == 2
    assert "--prompt-data=" in proc.stderr and "line 2" in proc.stderr and "'prompt'" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_a_refused_flag_under_several_ranks_is_reported_once_before_any_rank_starts(tmp_path):
    """launch/torchrun.sh validates in one process first: the message that names the flag is
    all there is (exit 2), not one per rank under torchrun's ChildFailedError report."""
    proc = run_recipe(
        tmp_path / "run", "--num-steps", "1", "--tensor-model-parallel-size", "2", nproc=2
    )
    assert proc.returncode == 2
    message = "--sequence-parallel=False: Megatron requires sequence parallelism"
    assert proc.stderr.count(message) == 1
    assert "ChildFailedError" not in proc.stderr and "torchrun" not in proc.stderr
    assert not (tmp_path / "run").exists()
