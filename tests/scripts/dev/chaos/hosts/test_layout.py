"""docs/DEPLOY.md's "Actors on other hosts" is what `make hosts` runs: its lines parse into a
learner host and actor hosts whose processes (the eval actor's included) each have their own id,
and a page that would give two processes one id is refused before anything starts."""

from __future__ import annotations

import pytest

from scripts.dev.chaos.hosts import layout
from scripts.service.host import EVAL_ACTOR_ID


def test_the_pages_hosts_give_every_process_its_own_id_and_a_key_pair():
    page = layout.read()  # LayoutError on two processes with one id
    learner = page.learner.host()
    (cpu_box,) = [c.host() for c in page.actor_hosts]
    assert learner.learner_autostart and learner.eval and not cpu_box.learner_autostart
    assert layout.ids(learner) == [*range(16), EVAL_ACTOR_ID]
    assert layout.ids(cpu_box) == list(range(16, 48))
    assert cpu_box.relay  # 32 actors of a learner on another host share one relay
    assert layout.id_problems(page) == []


def test_a_page_whose_next_host_starts_at_the_eval_actors_id_is_refused(tmp_path, monkeypatch):
    text = layout.PAGE.read_text()
    first = "make up N=32 FIRST_ACTOR=16 "
    assert first in text
    clash = text.replace(first, f"make up N=32 FIRST_ACTOR={EVAL_ACTOR_ID - 1} ")
    page = tmp_path / "DEPLOY.md"
    page.write_text(clash)
    with pytest.raises(layout.LayoutError, match=f"id {EVAL_ACTOR_ID} runs on the learner host"):
        layout.read(page)
    page.write_text(text.replace(first, "make up N=32 FIRST_ACTOR=15 "))
    with pytest.raises(layout.LayoutError, match="id 15 runs on the learner host and on actor"):
        layout.read(page)
