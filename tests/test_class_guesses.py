"""The class guesses before BERT answers: the teacher poses, each student guesses once, Reveal puts the
class beside the model. Students are separate sessions (AppTests) of one server, the teacher the session
that opened the teacher's link; the charts are read as the page sends them."""
import pytest
from streamlit.testing.v1 import AppTest

import figcheck
from bert_explorer import checkpoint
from bert_explorer.analysis.probes import guesses as gs
from bert_explorer.analysis.probes.pretraining_tasks import mlm_top_k, nsp_probability
from bert_explorer.app import guess_view, roles
from bert_explorer.safe_text import markdown_text

PAGE = "../pages/16_Guess_with_the_class.py"
CLOZE = "the capital of france is [MASK] ."


@pytest.fixture(scope="module")
def tokenizer():
    return checkpoint.load(checkpoint.DEFAULT_MODEL, "BertForPreTraining").tokenizer


# ----- the board ------------------------------------------------------------------------------------------
def test_a_guess_is_one_word_the_model_can_read(tokenizer):
    assert gs.one_word("  Paris ", tokenizer) == "paris"
    for bad, said in (("", "Type one word"), ("new york", "one word only"), ("x" * 41, "at most 40 characters"),
                      ("ᚠᚢ", "cannot read"), ("☃", "letters or digits")):
        with pytest.raises(gs.GuessRefused, match=said):
            gs.one_word(bad, tokenizer)
    assert gs.one_word("x" * 40, tokenizer) == "x" * 40  # the bound itself is taken
    # "Paris!" was counted apart from "paris" at the reveal, and "[MASK]" was taken as a guess
    assert gs.one_word("Paris!", tokenizer) == gs.one_word("“paris”", tokenizer) == "paris"
    assert gs.one_word("París", tokenizer) == "paris"  # as the uncased model reads it: one guess with "paris"
    for token in ("[MASK]", "[mask]", "[SEP]", "##s"):
        with pytest.raises(gs.GuessRefused, match="not a token of BERT's own"):
            gs.one_word(token, tokenizer)
    # markup was taken as "one word" and drawn bold on the class's chart; a word keeps an inner ' or -
    for markup in ("<b>x</b>", "<br>y", "<script>alert(1)</script>", "a_b", "x/y"):
        with pytest.raises(gs.GuessRefused, match="letters or digits"):
            gs.one_word(markup, tokenizer)
    assert gs.one_word("don't", tokenizer) == "don't" and gs.one_word("e-mail", tokenizer) == "e-mail"
    # a ligature is the word it draws (counted apart from "fire"); a link is no word, and not "a token of BERT's"
    assert gs.one_word("\ufb01re", tokenizer) == "fire"
    with pytest.raises(gs.GuessRefused, match="letters or digits"):
        gs.one_word("[link](javascript:alert(1))", tokenizer)


def test_the_board_keeps_one_guess_a_session_closes_at_the_reveal_and_forgets_with_the_next_question():
    board = gs.Board()
    with pytest.raises(gs.GuessRefused, match="exactly one word"):
        board.pose("cloze", "no mask here", None, "m")
    q = board.pose("cloze", CLOZE, None, "m")
    board.guess(q.id, "s1", "paris")
    board.guess(q.id, "s1", "lyon")  # changed before the reveal: one guess a session
    board.guess(q.id, "s2", "paris")
    assert board.current().guesses == {"s1": "lyon", "s2": "paris"}
    board.reveal(q.id, {"top": []})
    with pytest.raises(gs.GuessRefused, match="guesses are closed"):
        board.guess(q.id, "s3", "paris")
    nxt = board.pose("pair", "a .", "b .", "m")
    assert board.current().guesses == {} and board.current().answer is None
    with pytest.raises(gs.GuessRefused, match="That question is over"):
        board.guess(q.id, "s1", "paris")  # a page still showing the last question
    for i in range(gs.MAX_GUESSES):
        board.guess(nxt.id, f"s{i}", gs.YES)
    with pytest.raises(gs.GuessRefused, match=f"{gs.MAX_GUESSES} guesses already"):
        board.guess(nxt.id, "one more", gs.NO)
    board.guess(nxt.id, "s0", gs.NO)  # a student already counted may still change theirs
    # the teacher takes a word off the board (a script's flood of one word, or a word not for the screen)
    third = board.pose("cloze", CLOZE, None, "m")
    for i in range(5):
        board.guess(third.id, f"bot{i}", "spam")
    board.guess(third.id, "s1", "paris")
    assert board.take_off(third.id, "spam") == 5 and board.current().guesses == {"s1": "paris"}
    board.guess(third.id, "bot0", "lyon")  # who sent it may guess again


def test_the_tally_draws_ten_guesses_and_the_rest_as_other_and_the_sentences_count():
    said = ["paris"] * 5 + ["lyon"] * 3 + [f"w{i}" for i in range(12)]
    counts = gs.tally(said)
    assert counts[:2] == [("paris", 5), ("lyon", 3)] and len(counts) == 11 and counts[-1] == (gs.OTHERS, 4)
    top = [{"token": "france", "probability": 0.355}, {"token": "paris", "probability": 0.124}]
    assert gs.cloze_sentence(said, top) == ("0 of 20 students guessed the model's first answer, “france” (35.5%); it "
                                            "was not among the class's most frequent guesses (paris, lyon, then 12 tied "
                                            "at 1 each).")  # (it named w0 of twelve tied as the third)
    # one student, one guess: "among the class's three most frequent guesses (paris)" read oddly
    assert gs.cloze_sentence(["paris"], top) == ("0 of 1 student guessed the model's first answer, “france” (35.5%); "
                                                 "it was not the class's guess (paris).")
    # a class that guessed the word "other" ("on the [MASK] hand") is its own bar, never the rest's
    other = ["other"] * 3 + [f"w{i:02d}" for i in range(11)]
    assert [w for w, _ in gs.tally(other)].count("other") == 1 and gs.tally(other)[-1] == (gs.OTHERS, 2)
    assert gs.cloze_sentence(["other"] * 3, [{"token": "other", "probability": 0.9}]) == (
        "3 of 3 students guessed the model's first answer, “other” (90.0%); it was the class's guess (other).")
    assert gs.cloze_sentence(["other", "other", "paris"], [{"token": "paris", "probability": 0.5}]).endswith(
        "it was among the class's guesses (other, paris).")
    assert "P(IsNext) above 99.9%: 1 of 1" in gs.pair_sentence(["yes"], 0.99996)  # (it said "= 100.0%")
    # four guesses of one each: no three are "the most frequent" (paris was left out alphabetically)
    tied = gs.cloze_sentence(["paris", "don't", "e-mail", "other"], [{"token": "paris", "probability": 0.5}])
    assert tied.endswith("it was one of 4 guesses tied at 1 each (don't, e-mail, other, paris)."), tied  # said once
    after = gs.cloze_sentence(["mat", "mat", "paris", "don't", "e-mail", "other"], [{"token": "paris", "probability": 0.5}])
    assert after.endswith("it was one of 4 guesses tied at 1 each (after mat: don't, e-mail, other, paris)."), after
    assert gs.pair_sentence(["yes", "yes", "no"], 0.8) == ("2 students said yes and 1 said no; the model says yes, "
                                                          "P(IsNext) = 80.0%: 2 of 3 agreed with it.")


# ----- the page, a teacher and three students ------------------------------------------------------------
@pytest.fixture
def classroom(monkeypatch, runs_root):
    import streamlit as st

    # a student is a browser, known by its cookie: an AppTest's "sid" stands for the cookie its browser sends
    monkeypatch.setattr(guess_view, "browser_cookie", lambda: st.session_state.get("sid"))
    monkeypatch.setenv(roles.CLASSROOM_ENV, "1")
    monkeypatch.setenv(roles.TOKEN_ENV, "tok")
    monkeypatch.delenv(roles.WRITES_ENV, raising=False)
    guess_view.BOARD.clear()
    yield
    guess_view.BOARD.clear()


def _teacher():
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.query_params[roles.QUERY] = "tok"
    return at.run()


def _student(sid=None):
    at = AppTest.from_file(PAGE, default_timeout=120)
    at.session_state["sid"] = sid or f"student-browser-{id(at)}"
    return at.run()


def _send(student, word):
    student.text_input(key=f"guess_word_{guess_view.BOARD.current().id}").set_value(word)
    [b for b in student.button if b.label == "Send my guess"][0].click().run()
    return student


def test_three_students_guess_and_the_reveal_puts_the_class_beside_the_model(classroom):
    teacher, students = _teacher(), [_student() for _ in range(3)]
    for s in students:
        assert not s.exception and not [b for b in s.button if b.key in ("guess_pose", "guess_reveal")]
        assert any(i.value.startswith("Waiting for your teacher's question") for i in s.info)
    teacher.text_input(key="guess_text_own").set_value(CLOZE)
    teacher.button(key="guess_pose").click().run()
    for s, word in zip(students, ("Paris", "paris", "london")):
        s.run()
        assert any(markdown_text(CLOZE) in m.value for m in s.markdown)
        _send(s, word)
        assert any(f"Your guess: **{word.lower()}**" in c.value for c in s.caption)
    _send(students[2], "two words")  # refused, and the earlier guess stays
    assert any("one word only" in w.value for w in students[2].warning)
    # and still said when the box looks for news again: it vanished, and the guess seemed sent
    said = [w.value for w in students[2].run().warning]
    assert said == ["Not sent: Type one word only: the [MASK] hides one word. Your guess is still **london**."], said
    teacher.run()
    assert [m.value for m in teacher.metric] == ["3"]
    teacher.button(key="guess_reveal").click().run()
    assert not teacher.exception

    loaded = checkpoint.load(checkpoint.DEFAULT_MODEL, "BertForPreTraining")
    top = mlm_top_k(loaded, CLOZE, guess_view.TOP_K)[0]["predictions"]
    for at in (teacher, *[s.run() for s in students]):
        figs = {f.title.split(" (")[0]: f for f in figcheck.figures(at)}
        cls = figs["The class's guesses"]
        assert list(cls.traces[0].x) == ["paris", "london"] and list(cls.traces[0].y) == [2, 1]
        assert cls.title.endswith("(3 students)") and cls.layout["yaxis"]["tickformat"] == "d"  # whole students
        model = figs[f"{checkpoint.DEFAULT_MODEL}'s top {guess_view.TOP_K}"]
        assert list(model.traces[0].x) == [p["token"] for p in top]
        assert list(model.traces[0].y) == pytest.approx([p["probability"] for p in top], abs=1e-5)
        assert model.layout["yaxis"]["tickformat"] == ".0%"  # the bars' labels are percents: so is the axis
        said = [m.value for m in at.markdown if "guessed the model's first answer" in m.value]
        first = top[0]["token"]
        n = {"paris": 2, "london": 1}.get(first, 0)
        assert set(said) == {f"**{n} of 3 students guessed the model's first answer, “{first}” "
                        f"({top[0]['probability']:.1%}); it {'was' if n else 'was not'} among the class's guesses "
                        "(paris, london).**"}  # (the teacher's page shows a student's view too)
    # and each student where their own word stands among the model's answers
    ranks = {p["token"]: i for i, p in enumerate(top)}
    for s, word in zip(students, ("paris", "paris", "london")):
        (mine,) = [c.value for c in s.caption if c.value.startswith("You guessed")]
        assert mine.startswith(f"You guessed **{word}**") and (
            ("the model's " + ("first", "second", "third", "fourth", "fifth")[ranks[word]] + " answer, ") in mine
            if word in ranks and ranks[word] < 5 else "top" in mine or "number" in mine), mine


def test_a_guess_sent_as_the_answer_comes_out_is_said_not_sent(classroom):
    """A student typed "london" and pressed Send 0.2 s after the teacher's Reveal: the page drew the reveal, "No
    student guessed before the reveal", and not a word that the guess was never sent. Nor when the teacher posed the
    next question as a guess was on its way."""
    teacher, student, other = _teacher(), _student(), _student()
    teacher.text_input(key="guess_text_own").set_value(CLOZE)
    teacher.button(key="guess_pose").click().run()
    student.run()
    _send(other.run(), "paris")
    first = guess_view.BOARD.current().id
    student.text_input(key=f"guess_word_{first}").set_value("london")
    teacher.button(key="guess_reveal").click().run()  # (the student's page has not heard of it yet)
    [b for b in student.button if b.label == "Send my guess"][0].click().run()
    assert not student.exception
    assert [w.value for w in student.warning] == [f"Not sent (london): {gs.ANSWER_OUT}"]
    assert "london" not in guess_view.BOARD.current().guesses.values()
    # and still said when the box looks for news again (every 2 s: it was gone before it was read)
    assert [w.value for w in student.run().warning] == [f"Not sent (london): {gs.ANSWER_OUT}"]
    # the next question posed while a guess of the one before was on its way
    teacher.text_input(key="guess_text_own").set_value("the [MASK] is the largest city of france .")
    teacher.button(key="guess_pose").click().run()
    second = guess_view.BOARD.current().id
    student.run().text_input(key=f"guess_word_{second}").set_value("paris")
    teacher.text_input(key="guess_text_own").set_value("the [MASK] flows through paris .")
    teacher.button(key="guess_pose").click().run()
    [b for b in student.button if b.label == "Send my guess"][0].click().run()
    assert [w.value for w in student.warning] == [f"Not sent (paris): {gs.QUESTION_OVER}"]
    assert not guess_view.BOARD.current().guesses
    assert [w.value for w in student.run().warning] == [f"Not sent (paris): {gs.QUESTION_OVER}"]
    _send(student, "seine")  # a guess of this question sent: the sentence has done its work
    assert not student.warning and "seine" in guess_view.BOARD.current().guesses.values()


def test_a_question_the_model_cannot_answer_is_refused_at_pose_not_at_the_reveal(classroom):
    """A [MASK] past the 512 WordPieces the model reads was posed, guessed by the class, and Reveal then raised:
    the answer is computed when the teacher poses (Reveal only shows it), so the question is refused at once."""
    teacher = _teacher()
    teacher.text_input(key="guess_text_own").set_value("a " * 600 + "[MASK] .")
    teacher.button(key="guess_pose").click().run()
    assert not teacher.exception and guess_view.BOARD.current() is None
    (said,) = [w.value for w in teacher.warning if "512" in w.value]
    assert said.startswith("Every [MASK] of the text lies past") and said.endswith(".")


def test_a_question_whose_every_mask_the_box_cuts_off_is_not_posed_and_said_once(classroom):
    """A 5,008-character question whose [MASK] lies past the 2,000 characters the box reads: the box's warning
    says so, and Pose is off (it went on to "A cloze for the class hides exactly one word: write [MASK] once")."""
    teacher = _teacher()
    teacher.text_input(key="guess_text_own").set_value("word " * 1000 + "[MASK] .").run()
    assert not teacher.exception and teacher.button(key="guess_pose").disabled
    said = [w.value for w in teacher.warning]
    assert any("Every [MASK] in it lies past them" in w for w in said) and not any("write [MASK]" in w for w in said)
    teacher.text_input(key="guess_text_own").set_value("the river [MASK] .").run()
    assert not teacher.button(key="guess_pose").disabled


def test_a_pair_shows_the_class_split_beside_p_isnext(classroom):
    teacher, student = _teacher(), _student()
    teacher.radio(key="guess_kind").set_value("pair").run()
    teacher.button(key="guess_pose").click().run()
    student.run()
    q = guess_view.BOARD.current()
    student.radio(key=f"guess_pair_{q.id}").set_value("yes")
    [b for b in student.button if b.label == "Send my guess"][0].click().run()
    teacher.run().button(key="guess_reveal").click().run()
    p = nsp_probability(checkpoint.load(checkpoint.DEFAULT_MODEL, "BertForPreTraining"), [(q.text, q.text_b)])[0]
    figs = {f.title.split(" (")[0]: f for f in figcheck.figures(teacher)}
    assert list(figs["The class: is B the next sentence?"].traces[0].y) == [1, 0]
    model = figs[f"{checkpoint.DEFAULT_MODEL}'s answer"]
    assert list(model.traces[0].y) == pytest.approx([p["is_next"], 1 - p["is_next"]], abs=1e-5)
    # in the class's words, its labels never a certainty that one decimal made of 99.996 %
    assert list(model.traces[0].x) == ["yes (IsNext)", "no (NotNext)"]
    assert all(t in ("<0.1%", ">99.9%") or float(t.rstrip("%")) < 99.95 for t in model.traces[0].raw["text"])
    assert "You answered **yes**." in [c.value for c in student.run().caption]
    answer = student.radio(key=f"guess_pair_{q.id}")  # the box stays at the reveal, closed, as it was
    assert answer.value == "yes" and answer.disabled
    # and its caption speaks of the choice: nothing was typed in a yes/no box
    closed = [c.value for c in student.caption if c.value.startswith("Guesses closed")]
    assert closed == ["Guesses closed at the reveal: the box keeps your choice, and only a guess you sent is "
                      "counted."], closed


def test_a_student_who_reloads_or_opens_a_second_tab_is_still_one_student(classroom):
    """One browser is one student: a reload or a second tab (a new session, the same cookie) sees its guess and
    changes it; the count stays one. A browser with no cookie yet is given an id and the cookie that keeps it."""
    teacher = _teacher()
    teacher.text_input(key="guess_text_own").set_value(CLOZE)
    teacher.button(key="guess_pose").click().run()
    first = _send(_student("the-same-browser-0001"), "london")
    again = _student("the-same-browser-0001")  # a reload, or a second tab of the same browser
    assert any("Your guess: **london**" in c.value for c in again.caption)
    _send(again, "berlin")
    _send(_student("the-same-browser-0001"), "rome")
    _send(_student(), "paris")  # another student
    assert sorted(guess_view.BOARD.current().guesses.values()) == ["paris", "rome"]
    assert [m.value for m in teacher.run().metric] == ["2"]
    # the teacher is told what the count counts: a browser that lost its cookie guesses again as another student
    counted = ("One guess a browser: a browser that lost its cookie (closed and reopened, a private window, cookies "
               "cleared) counts as another student.")
    assert counted in [c.value for c in teacher.caption]
    teacher.button(key="guess_reveal").click().run()
    assert counted in [c.value for c in teacher.caption]  # and beside the class's chart at the reveal
    assert not first.exception
    # a browser without the cookie: an id of its own, and the script that sets the cookie, once
    fresh = AppTest.from_file(PAGE, default_timeout=120).run()
    made = fresh.session_state[guess_view.STUDENT_KEY]
    assert guess_view.STUDENT_ID.fullmatch(made)
    assert any(f"{guess_view.STUDENT_COOKIE}={made}" in str(e.proto) for e in fresh.get("html"))
    assert not any(guess_view.STUDENT_COOKIE in str(e.proto) for e in fresh.run().get("html"))
    assert fresh.session_state[guess_view.STUDENT_KEY] == made


def test_the_teacher_sees_the_words_before_the_reveal_and_takes_one_off_the_board(classroom):
    teacher, students = _teacher(), [_student() for _ in range(3)]
    teacher.text_input(key="guess_text_own").set_value("she drank a **glass** of [MASK] ![x](http://example.invalid/x.png)")
    teacher.button(key="guess_pose").click().run()
    for s, word in zip(students, ("water", "spam", "spam")):
        _send(s.run(), word)
    for s in students:  # a student sees no guess of another before the reveal, and takes none off
        assert not [b for b in s.run().button if str(b.key).startswith("guess_off")]
        assert not [c for c in s.caption if c.value.startswith("Only you see these")]
    # the question is shown as the characters the model reads: no bold, no image fetched from another site
    shown = [m.value for m in students[0].markdown if "Which word" in m.value][0]
    assert "\\*\\*glass\\*\\*" in shown and "!\\[x\\]" in shown
    teacher.run()
    assert any(c.value == "Only you see these before the reveal: spam (2), water (1)" for c in teacher.caption)
    q = guess_view.BOARD.current()
    teacher.selectbox(key=f"guess_off_{q.id}").set_value("spam").run()
    teacher.button(key=f"guess_off_go_{q.id}").click().run()
    assert not teacher.exception and list(guess_view.BOARD.current().guesses.values()) == ["water"]
    assert [m.value for m in teacher.run().metric] == ["1"]
    # its sender is told, once the box looks again (the caption of the guess went without a word)
    said = [i.value for i in students[1].run().info]
    assert "Your teacher took **spam** off the board; you may send another guess." in said, said
    assert not [i for i in students[0].run().info if "took" in i.value]  # not the student who said water


def test_a_model_without_the_head_a_question_needs_cannot_be_asked_it(classroom):
    """MiniLM (no pre-training heads) "answered" a cloze with its random head: judicial, skirt, somewhere."""
    teacher = AppTest.from_file(PAGE, default_timeout=120)
    teacher.query_params[roles.QUERY] = "tok"
    teacher.session_state["be_model_choice"] = "minilm"
    teacher.run()
    assert not teacher.exception and not [b for b in teacher.button if b.key == "guess_pose"]
    assert any("has no trained masked-LM head" in w.value for w in teacher.warning)


@pytest.mark.parametrize("name, said", [
    ("minilm", "MiniLM was trained as a sentence encoder"),
    ("runs/finetune-sst2/model", "its files hold no weights for that head"),
])
def test_a_model_without_a_head_is_told_why_of_itself_not_of_minilm(name, said):
    """Every headless model (a fine-tuned encoder, an upload) was told "MiniLM was trained as a sentence encoder"."""
    def page(name):  # (a script of its own: its imports inside)
        from types import SimpleNamespace

        from bert_explorer.app.widgets import needs_head
        report = SimpleNamespace(missing=["masked-LM head"], untrained={})
        needs_head(SimpleNamespace(name=name, path=name, report=report),
                   "masked-LM head", "answer a masked word")

    at = AppTest.from_function(page, args=(name,)).run()
    [warning] = [w.value for w in at.warning]
    assert said in warning and ("MiniLM was trained" in warning) == (name == "minilm")


def test_posing_over_guesses_never_revealed_asks_first_in_one_sentence_and_one_press(classroom):
    """A Pose pressed on a page drawn before the class's guesses arrived posed nothing and said nothing: a checkbox
    appeared, Pose went grey, and a tick and a second press were needed. The press now says what the next question
    would drop, and the button that appears poses it at its first press; nothing is dropped unasked."""
    teacher, student = _teacher(), _student()
    teacher.button(key="guess_pose").click().run()
    q = guess_view.BOARD.current()
    _send(student.run(), "paris")  # (the teacher's page, drawn before it, has not run since)
    teacher.text_input(key="guess_text_own").set_value("the [MASK] flows through paris .")
    teacher.button(key="guess_pose").click().run()
    assert not teacher.exception and guess_view.BOARD.current().id == q.id  # the class's guess is still there
    said = [w.value for w in teacher.warning if w.value.startswith("Not posed")]
    assert said == ["Not posed yet: the question on the board has 1 guess not yet revealed, and posing the next "
                    "question drops it. Reveal it first to show the class's guesses beside the model, or pose "
                    "anyway."], said
    drop = teacher.button(key="guess_pose_drop")
    assert drop.label == "Pose it and drop the 1 guess" and not drop.disabled
    drop.click().run()
    now = guess_view.BOARD.current()
    assert not teacher.exception and now.id != q.id and now.text == "the [MASK] flows through paris ."
    assert not [w for w in teacher.warning if w.value.startswith("Not posed")]
    # and "Keep the guesses" keeps them, the question on the board unchanged
    _send(student.run(), "seine")
    teacher.button(key="guess_pose").click().run()
    teacher.button(key="guess_pose_keep").click().run()
    assert list(guess_view.BOARD.current().guesses.values()) == ["seine"]
    assert not [w for w in teacher.warning if w.value.startswith("Not posed")]
    assert not [b for b in teacher.button if b.key == "guess_pose_drop"]
    # a question revealed drops nothing: one press poses the next
    teacher.button(key="guess_reveal").click().run()
    teacher.button(key="guess_pose").click().run()
    assert guess_view.BOARD.current().answer is None and not guess_view.BOARD.current().guesses


def test_a_guess_typed_and_not_sent_stays_in_the_box_at_the_reveal(classroom):
    """A student typed a word and had not pressed Send when the teacher revealed: the box went with the reveal, and
    the word with it. The box stays, closed, and says only a sent guess is counted. A word typed in a form stays in
    the browser, not sent to the server (AppTest does the same): the browser keeps it in a box of the same id."""
    teacher, student = _teacher(), _student()
    teacher.button(key="guess_pose").click().run()
    q = guess_view.BOARD.current()
    _send(student.run(), "paris")
    typed = student.text_input(key=f"guess_word_{q.id}")
    typed.set_value("london")  # typed over it, never sent
    teacher.button(key="guess_reveal").click().run()
    student.run()
    assert not student.exception
    box = student.text_input(key=f"guess_word_{q.id}")
    assert box.proto.id == typed.proto.id and box.disabled  # (the same box: what the browser holds in it stays)
    assert [b for b in student.button if b.label == "Send my guess"][0].disabled
    said = [c.value for c in student.caption]
    assert ("Guesses closed at the reveal: the box keeps what you typed, and only a guess you sent is counted."
            in said and any(c.startswith("You guessed **paris**") for c in said)), said
    assert list(guess_view.BOARD.current().guesses.values()) == ["paris"]


def test_a_guess_that_arrives_after_the_question_is_not_dropped_unasked(classroom):
    """The teacher read "Pose it and drop the 1 guess", a second student sent "rome", and the click dropped 2: the
    click poses only over the guesses the teacher was told of, else it says the new count and asks again."""
    teacher, first, second = _teacher(), _student(), _student()
    teacher.button(key="guess_pose").click().run()
    q = guess_view.BOARD.current()
    _send(first.run(), "paris")
    teacher.text_input(key="guess_text_own").set_value("the [MASK] flows through paris .")
    teacher.button(key="guess_pose").click().run()
    assert teacher.button(key="guess_pose_drop").label == "Pose it and drop the 1 guess"
    _send(second.run(), "rome")  # (the teacher's page, drawn before it, has not run since)
    teacher.button(key="guess_pose_drop").click().run()
    assert not teacher.exception
    assert guess_view.BOARD.current().id == q.id and sorted(guess_view.BOARD.current().guesses.values()) == [
        "paris", "rome"]  # nothing dropped that the teacher did not agree to drop
    said = [w.value for w in teacher.warning if w.value.startswith("Not posed")]
    assert said == ["Not posed yet: 1 more guess arrived since you read the count. The question on the board has 2 "
                    "guesses not yet revealed, and posing the next question drops them. Reveal it first to show the "
                    "class's guesses beside the model, or pose anyway."], said
    drop = teacher.button(key="guess_pose_drop")
    assert drop.label == "Pose it and drop the 2 guesses"
    drop.click().run()  # agreed to, now: posed
    assert guess_view.BOARD.current().text == "the [MASK] flows through paris ."
    assert not [w for w in teacher.warning if w.value.startswith("Not posed")]


def test_the_pose_warning_goes_for_good_once_no_guess_waits(classroom):
    """Asked, then the teacher took the one guess off the board: the warning went. A student's guess later and a
    sentence typed brought the warning and its drop button back, with no Pose pressed."""
    teacher, student = _teacher(), _student()
    teacher.button(key="guess_pose").click().run()
    q = guess_view.BOARD.current()
    _send(student.run(), "spam")
    teacher.run().button(key="guess_pose").click().run()
    assert [b for b in teacher.button if b.key == "guess_pose_drop"]
    teacher.selectbox(key=f"guess_off_{q.id}").set_value("spam").run()
    teacher.button(key=f"guess_off_go_{q.id}").click().run()
    assert not guess_view.BOARD.current().guesses
    assert not [w for w in teacher.warning if w.value.startswith("Not posed")]
    _send(student.run(), "paris")
    teacher.text_input(key="guess_text_own").set_value("the [MASK] flows through paris .").run()
    assert not teacher.exception
    assert not [w for w in teacher.warning if w.value.startswith("Not posed")]
    assert not [b for b in teacher.button if b.key == "guess_pose_drop"]
    assert guess_view.BOARD.current().id == q.id  # (and nothing posed)
