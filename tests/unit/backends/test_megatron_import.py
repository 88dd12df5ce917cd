"""megatron-core imported through hyrl.backends.megatron: its torch.compile'd functions are
compiled at their first call, as always, but the compiler (TorchDynamo, Inductor) is no longer
imported with megatron (2 s of every rank's start on the 2-core CPU machine)."""

import subprocess
import sys
import textwrap

from hyrl.backends.megatron import _compile_deferred


def test_importing_megatron_leaves_the_compiler_out_and_torch_compile_as_it_was():
    code = """
        import sys, torch
        compile_before = torch.compile
        import hyrl.backends.megatron.model  # megatron.core and its GPT model
        import megatron.core.jit, megatron.core.models.gpt
        assert torch.compile is compile_before
        assert "torch._dynamo" not in sys.modules, "the compiler was imported"
        from megatron.core.transformer.moe.router import TopKRouter
        assert TopKRouter._apply_expert_bias.__wrapped__.__name__ == "_apply_expert_bias"
        print("ok")
        """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_a_deferred_function_is_compiled_once_at_its_first_call_with_the_same_options():
    calls = []

    def compile_now(fn, **options):
        calls.append((fn.__name__, options))
        return lambda *args, **kwargs: ("compiled", fn(*args, **kwargs))

    deferred = _compile_deferred(compile_now)

    def add(a, b=1):
        return a + b

    wrapped = deferred(add, mode="max-autotune")
    assert calls == [] and wrapped.__wrapped__ is add and wrapped.__name__ == "add"
    assert wrapped(1, b=2) == ("compiled", 3)
    assert wrapped(5) == ("compiled", 6)
    assert calls == [("add", {"mode": "max-autotune"})]  # once, with the options given

    @deferred(dynamic=True)  # the decorator-factory form
    def double(x):
        return 2 * x

    assert double(4) == ("compiled", 8) and calls[-1] == ("double", {"dynamic": True})
