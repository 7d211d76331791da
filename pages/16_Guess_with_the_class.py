import streamlit as st

from bert_explorer import limits
from bert_explorer.analysis.probes import guesses as gs
from bert_explorer.analysis.probes.check_set import load_check_set
from bert_explorer.analysis.probes.pretraining_tasks import MLM_HEAD, NSP_HEAD
from bert_explorer.app import guess_view as gv
from bert_explorer.app.roles import writes_allowed
from bert_explorer.app.state import picked_model
from bert_explorer.app.keep import text_box
from bert_explorer.app.widgets import intro, needs_head

intro("Guess with the class", """
Before BERT answers, the class answers. The teacher poses a sentence with one word hidden behind `[MASK]`
(BERT's masked-LM task, Devlin et al. 2019, Section 3.1) or a pair of sentences ("is B the next sentence?",
its next-sentence task); every student sends one guess, and on **Reveal** the class's guesses stand beside
what the model on screen answers, with the numbers counted from both.
""")

name, loaded = picked_model("BertForPreTraining")
gv.keep_student()  # (one browser, one student: its tabs and reloads guess as one)
OWN = "(type your own)"

if writes_allowed():  # the teacher (or this machine's user): poses and reveals
    q = gv.BOARD.current()
    if q is not None:  # the board first: it is what the class looks at on the projector
        st.markdown(f"**On the board** (asked of {q.model}): " + gv.question_text(q))
        if q.answer is None:
            gv.teacher_count()
            if st.button("Reveal", key="guess_reveal", type="primary",
                         help="The model answers, and every student's page shows the class beside it."):
                gv.BOARD.reveal(q.id)  # (the answer was computed when the question was posed)
                st.rerun()
        else:
            gv.reveal(q, f"guess_{q.id}_t")
            st.caption(gv.ONE_A_BROWSER)  # (the class's chart counts browsers)
        st.divider()
    st.subheader("The next question" if q is not None else "The question")
    kind = st.radio("Kind", ["cloze", "pair"], horizontal=True, key="guess_kind", persist_state="session",
                    format_func={"cloze": "a word behind [MASK]", "pair": "is B the next sentence?"}.get)
    check = load_check_set()
    text_b = None
    masks_cut = False  # every [MASK] lay past what the box reads: its warning says so, and nothing is posed
    if kind == "cloze":
        examples = [c["text"] for c in check["cloze"]]
        picked = st.selectbox("An example from the Masked word probe's check set", [OWN, *examples],
                              key="guess_example", persist_state="session")
        cloze_key = f"guess_text_{examples.index(picked) if picked != OWN else 'own'}"
        text = text_box(st.text_input, "The sentence, with [MASK] once", picked if picked != OWN else
                             "the capital of france is [MASK] .", max_chars=limits.CHARS,
                        key=cloze_key, persist_state="session")
        masks_cut = "[MASK]" in str(st.session_state.get(cloze_key, "")) and "[MASK]" not in text
    else:
        pair = check["nsp"][0]
        text = text_box(st.text_input, "Sentence A", pair["a"], max_chars=limits.CHARS, key="guess_a",
                        persist_state="session")
        text_b = text_box(st.text_input, "Sentence B", pair["b"], max_chars=limits.CHARS, key="guess_b",
                          persist_state="session")
    # a model without the head the question needs would "answer" with random weights (MiniLM's judicial, skirt, ...)
    answers = needs_head(loaded, MLM_HEAD if kind == "cloze" else NSP_HEAD,
                         "answer " + ("a masked word" if kind == "cloze" else "whether B follows A"))
    # the class's guesses to a question not yet revealed are theirs: posing over them asks first, at the click
    # (guesses that arrive reach this page's count every few seconds, not its Pose button)
    if answers:
        pose = st.button("Pose to the class", key="guess_pose", type="primary", disabled=masks_cut,
                         help="The students' pages show it within seconds; guesses to a question not yet revealed "
                              "are dropped only once you say so.")
        now = gv.BOARD.current()
        waiting = len(now.guesses) if now is not None and now.answer is None else 0
        # what the teacher was asked: (the question, how many guesses its warning last said posing drops)
        asked = st.session_state.get("guess_pose_asked")
        if not waiting or (asked and asked[0] != now.id):  # nothing left to drop: the asking is over, and a later
            st.session_state.pop("guess_pose_asked", None)  # guess does not bring its warning back unasked
            asked = None
        if pose and waiting:
            asked = (now.id, waiting)
            pose = False
        if asked:
            said = st.container()  # (above the buttons, written once the drop button is read)
            n = f"{waiting} guess{'es' if waiting != 1 else ''}"
            drop, keep = st.columns(2)
            pose = drop.button(f"Pose it and drop the {n}", key="guess_pose_drop")
            more = waiting - asked[1]
            if pose and more > 0:  # the teacher agreed to drop fewer than the board now holds: asked again
                pose = False
            st.session_state["guess_pose_asked"] = (now.id, waiting)  # the count this warning says
            the = f"{more} more guess{'es' if more != 1 else ''} arrived since you read the count. The" if more > 0 \
                else "the"
            said.warning(f"Not posed yet: {the} question on the board has {n} not yet revealed, and posing the next "
                         f"question drops {'them' if waiting != 1 else 'it'}. Reveal it first to show the class's "
                         "guesses beside the model, or pose anyway.")
            if keep.button("Keep the guesses", key="guess_pose_keep"):
                del st.session_state["guess_pose_asked"]
                st.rerun()
        if pose:
            try:
                gv.BOARD.pose(kind, text, text_b, name, loaded.tokenizer.id_to_token(loaded.tokenizer.mask_id),
                              answer_of=lambda question: gv.model_answer(question, loaded))
                st.session_state.pop("guess_pose_asked", None)
                st.rerun()
            except gs.GuessRefused as e:
                st.warning(str(e))
    with st.expander("What a student's page shows (you may guess too)"):
        gv.student_box()
else:
    gv.student_box()
