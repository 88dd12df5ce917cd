"""The fake SGLang server accepts and refuses weight-update sessions as SGLang 0.5.23 does: the
table in tests/helpers/sglang_sessions.py, which tests/contract/ runs against SGLang's own
scheduler code."""

import functools

import pytest
import sglang_sessions as table
from fake_sglang_server import FakeSGLangServer, pickle_serializer

from hyrl.rollout.sglang.client import SGLangClient


@pytest.mark.parametrize(("mode", "sequence"), table.ROWS)
def test_the_fake_answers_each_session_sequence_as_sglang(mode, sequence, tmp_path):
    with FakeSGLangServer() as fake:
        fake._groups[table.GROUP_NAME] = object()  # as if /init_weights_update_group had run
        post = functools.partial(SGLangClient(fake.url).request, "POST")
        got = table.answers(post, mode, sequence, str(tmp_path), pickle_serializer)
    assert got == table.EXPECTED[(mode, sequence)]


def test_the_table_covers_every_mode_and_sequence():
    assert set(table.EXPECTED) == set(table.ROWS)
    for (mode, sequence), answers in table.EXPECTED.items():
        assert len(answers) == len(table.SEQUENCES[sequence]), (mode, sequence)
