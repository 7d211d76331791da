"""Our WordPiece tokenizer against transformers' BERT tokenizer on the same vocabulary.

Every expected value here comes from transformers (``BertTokenizerFast.from_pretrained`` /
``AutoTokenizer``), never from our own earlier output: ids, segment ids, attention masks,
character offsets, word ids, truncation and padding must be identical, for the released
uncased vocab (MiniLM's, = bert-base-uncased), for a cased vocab, and for vocabularies we
train ourselves and save.
"""
import json
import random
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bert_explorer.tokenizer import SPECIAL_TOKENS, WordPieceTokenizer  # noqa: E402

SINGLES = [
    "The cat sat on the mat.",
    "Hello, World!!! How's it going?",
    "Café naïve façade Zoë résumé — déjà vu",
    "ÅNGSTRÖM UNITS and ÉCOLE Polytechnique",
    "東京は日本の首都です。北京",
    "mixed中文and English",
    "unbelievably antidisestablishmentarianism",
    "tabs\tand\nnewlines  and\u00a0nbsp\u3000ideographic space",
    "zero\u200bwidth, a control\x07char and a soft\u00adhyphen",
    "emoji 🙂 and symbols © ® ™ € $ 100% #hashtag @user",
    "numbers 3.14159 and 1,000,000 and 2024-11-22",
    "[MASK] is a special token, as is [SEP]",
    "ligature ﬁ, fullwidth ＡＢＣ and ½",
    "   leading and trailing spaces   ",
    "Greek Ελληνικά, Cyrillic Привет, Arabic مرحبا, Hindi नमस्ते, Korean 안녕하세요",
    "a" * 150 + " word longer than 100 characters",
    "",
]

PAIRS = [
    ("He went to the store.", "He bought a gallon of milk."),
    ("Penguins are flightless.", "Yes."),
    ("Où est la bibliothèque?", "東京タワーの近くです!"),
    ("A", "A much longer second sentence, with punctuation; and more words."),
    ("", "Only the second sentence has text."),
]

# (sentence A, sentence B, max_length) for longest-first truncation
TRUNCATION = [
    ("The quick brown fox jumps over the lazy dog near the river bank.", "A short one.", 12),
    ("Short.", "The quick brown fox jumps over the lazy dog near the river bank.", 12),
    ("one two three four five six seven", "eight nine ten eleven twelve thirteen fourteen", 10),
    ("one two three four five six seven", "eight nine ten eleven twelve thirteen fourteen", 11),
    ("unbelievable antidisestablishmentarianism", "incomprehensibilities everywhere", 9),
    ("Café naïve façade Zoë résumé", "東京は日本の首都です", 13),
    ("a b c d e f g h i j", "k l m n o p q r", 10),  # both cut, odd room, A longer
    ("a b c d e f g h", "k l m n o p q r s t", 10),  # both cut, odd room, B longer
    ("tiny", "pair", 64),  # nothing to cut
]


def _ours_vs_hf(ours, hf, text, pair=None, **hf_kwargs):
    a = ours.encode(text, pair, max_length=hf_kwargs.get("max_length"))
    b = hf(text, pair, return_offsets_mapping=True, **hf_kwargs)
    ctx = (text, pair, a.tokens, hf.convert_ids_to_tokens(b["input_ids"]))
    assert a.input_ids == b["input_ids"], ctx
    assert a.token_type_ids == b["token_type_ids"], ctx
    assert a.attention_mask == b["attention_mask"], ctx
    assert a.offsets == [tuple(o) for o in b["offset_mapping"]], ctx
    assert a.word_ids == b.word_ids(), ctx
    assert a.sequence_ids == b.sequence_ids(), ctx
    assert a.tokens == hf.convert_ids_to_tokens(b["input_ids"]), ctx
    return a, b


# ----- vocabularies ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def uncased(minilm_dir):
    return WordPieceTokenizer.from_dir(minilm_dir), transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))


CASED_VOCAB = (
    SPECIAL_TOKENS
    + list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()-éüñöÉÅ東京北日本")
    + ["##" + c for c in "abcdefghijklmnopqrstuvwxyzéüñö"]
    + ["The", "the", "THE", "Cat", "cat", "##ing", "##er", "play", "Play", "caf",
       "Paris", "paris", "Zo", "##ë", "He", "he", "went", "Went", "store", "Store"]
)
assert len(set(CASED_VOCAB)) == len(CASED_VOCAB)


@pytest.fixture(scope="module")
def cased_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cased")
    (d / "vocab.txt").write_text("".join(t + "\n" for t in CASED_VOCAB), encoding="utf-8")
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": False}))
    return d


@pytest.fixture(scope="module")
def cased(cased_dir):
    hf = transformers.AutoTokenizer.from_pretrained(str(cased_dir))
    assert hf.do_lower_case is False
    return WordPieceTokenizer.from_dir(cased_dir), hf


def generated_sentences(n=400, seed=0):
    """Sentences over a made-up lexicon: many distinct words sharing sub-word pieces."""
    rng = random.Random(seed)
    syllables = ["ka", "ro", "mi", "ten", "dus", "pla", "ing", "er", "ed", "str", "ö", "é", "un", "re",
                 "tion", "qu", "ax", "lo"]
    lexicon = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    out = []
    for _ in range(n):
        words = [rng.choice(lexicon) for _ in range(rng.randint(5, 14))]
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + rng.choice([".", "!", "?", ", 東京.", " (ok)."]))
    return out


TEXTS = generated_sentences()
TRAINED_SIZE = 300


@pytest.fixture(scope="module", params=[True, False], ids=["trained-uncased", "trained-cased"])
def trained(request, tmp_path_factory):
    ours = WordPieceTokenizer.train(TEXTS, vocab_size=TRAINED_SIZE, lowercase=request.param)
    d = tmp_path_factory.mktemp("trained")
    ours.save(d)
    # transformers from the saved directory (tokenizer.json) and from vocab.txt +
    # tokenizer_config.json alone: the second proves vocab.txt's line numbers are our ids.
    bare = tmp_path_factory.mktemp("trained_vocab_only")
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(d / name, bare / name)
    hf_full = transformers.AutoTokenizer.from_pretrained(str(d))
    hf_bare = transformers.BertTokenizerFast.from_pretrained(str(bare))
    assert hf_bare.do_lower_case is request.param
    return ours, hf_full, hf_bare, d, request.param


# ----- uncased (MiniLM = bert-base-uncased vocab) ------------------------------------------------

@pytest.mark.parametrize("text", SINGLES)
def test_uncased_single_matches_transformers(uncased, text):
    _ours_vs_hf(*uncased, text)


@pytest.mark.parametrize("a,b", PAIRS)
def test_uncased_pair_matches_transformers(uncased, a, b):
    enc, _ = _ours_vs_hf(*uncased, a, b)
    assert enc.token_type_ids.count(1) == len(uncased[0].tokenize(b)) + 1  # B and its [SEP]


def test_uncased_lowercases_and_strips_accents(uncased):
    ours, hf = uncased
    assert ours.tokenize("Café NAÏVE") == hf.tokenize("Café NAÏVE") == ["cafe", "naive"]


def test_pair_word_ids_restart_for_sentence_b(uncased):
    ours, hf = uncased
    a, b = "Unaffable giraffes walk.", "Thinking, then walking."
    enc = ours.encode(a, b)
    ref = hf(a, b)
    assert enc.word_ids == ref.word_ids()
    assert enc.sequence_ids == ref.sequence_ids()
    # The structure itself: specials have no word, B's words are counted from 0 again.
    sep = enc.input_ids.index(ours.sep_id)
    assert enc.word_ids[0] is None and enc.word_ids[sep] is None and enc.word_ids[-1] is None
    assert enc.word_ids[1] == 0 and enc.word_ids[sep + 1] == 0
    assert max(w for w in enc.word_ids[sep + 1:-1]) == 4  # Thinking , then walking .


def test_special_token_ids_match_transformers(uncased):
    ours, hf = uncased
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (
        hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id)
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 100, 101, 102, 103)
    assert ours.special_ids() == set(hf.all_special_ids)
    assert ours.vocab_size == len(hf) == 30522
    ids = [0, 100, 101, 102, 103, 1996, 7592, 29612, 30521]
    assert ours.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    for tok in ["[MASK]", "the", "##ing", "hello", "not-in-vocab-xyz"]:
        assert ours.token_to_id(tok) == hf.convert_tokens_to_ids(tok) or (
            ours.token_to_id(tok) is None and hf.convert_tokens_to_ids(tok) == hf.unk_token_id)


@pytest.mark.parametrize("a,b,max_length", TRUNCATION)
def test_longest_first_truncation_matches_transformers(uncased, a, b, max_length):
    ours, hf = uncased
    enc, _ = _ours_vs_hf(ours, hf, a, b, truncation="longest_first", max_length=max_length)
    # And the rule itself: each sentence keeps a prefix of its pieces, pieces come off the
    # longer one first, and when both must be cut they end up with half the room each.
    pa, pb = ours.tokenize(a), ours.tokenize(b)
    room = max_length - 3
    if len(pa) + len(pb) <= room:
        ka, kb = len(pa), len(pb)
    elif 2 * min(len(pa), len(pb)) <= room:
        ka, kb = (len(pa), room - len(pa)) if len(pa) < len(pb) else (room - len(pb), len(pb))
    else:
        # the odd piece stays with the sentence that was longer (B on a tie). The original
        # code's _truncate_seq_pair gives it to A instead; we follow transformers.
        short, long_ = room // 2, room - room // 2
        ka, kb = (long_, short) if len(pa) > len(pb) else (short, long_)
    assert enc.tokens == ["[CLS]", *pa[:ka], "[SEP]", *pb[:kb], "[SEP]"]


def test_single_sentence_truncation_and_no_leaking_state(uncased):
    ours, hf = uncased
    text = "The quick brown fox jumps over the lazy dog near the river bank."
    _ours_vs_hf(ours, hf, text, truncation=True, max_length=7)
    assert len(ours.encode(text, max_length=7).input_ids) == 7
    # a later call without max_length must not inherit the truncation of the earlier one
    assert ours.encode(text).input_ids == hf(text)["input_ids"]
    assert len(ours.encode(text).input_ids) > 7


@pytest.mark.parametrize("examples", [SINGLES[:6], PAIRS], ids=["singles", "pairs"])
def test_batch_padding_matches_transformers(uncased, examples):
    ours, hf = uncased
    got = ours.batch(examples)
    if isinstance(examples[0], tuple):
        ref = hf([a for a, _ in examples], [b for _, b in examples], padding=True, truncation=True,
                 max_length=512, return_tensors="pt")
    else:
        ref = hf(examples, padding=True, truncation=True, max_length=512, return_tensors="pt")
    assert (got["attention_mask"] == 0).any(), "the batch must need padding"
    for k in ("input_ids", "token_type_ids", "attention_mask"):
        assert got[k].dtype == torch.long
        assert torch.equal(got[k], ref[k]), k


def test_batch_truncates_to_512_like_transformers(uncased):
    ours, hf = uncased
    long = " ".join(["word"] * 700)
    got = ours.batch([long, "short one"])
    ref = hf([long, "short one"], padding=True, truncation=True, max_length=512, return_tensors="pt")
    assert got["input_ids"].shape == (2, 512)
    for k in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(got[k], ref[k]), k


def test_encode_pad_to_matches_transformers_max_length_padding(uncased):
    ours, hf = uncased
    a, b = "He went to the store.", "Milk."
    enc = ours.encode(a, b, pad_to=20)
    ref = hf(a, b, padding="max_length", max_length=20, return_offsets_mapping=True)
    assert len(enc.input_ids) == 20
    assert enc.input_ids == ref["input_ids"]
    assert enc.token_type_ids == ref["token_type_ids"]
    assert enc.attention_mask == ref["attention_mask"]
    assert enc.offsets == [tuple(o) for o in ref["offset_mapping"]]
    assert enc.word_ids == ref.word_ids()


# ----- cased ------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,pair", [
    ("The Cat", None),
    ("the cat THE CAT", None),
    ("The Cats playing café", "Zoë went to Paris!"),
    ("Éclair ÅNGSTRÖM ñandú", "東京 北京 日本"),
    ("He went to the Store.", "he went to the store."),
    ("Xylophone QUIZ; (ok)", "Ünïcödé wörds: naïve"),
])
def test_cased_vocab_matches_transformers(cased, text, pair):
    _ours_vs_hf(*cased, text, pair)


def test_cased_vocab_keeps_case_and_accents(cased):
    ours, hf = cased
    assert not ours.lowercase
    ids_upper = ours.encode("The Cat").input_ids
    ids_lower = ours.encode("the cat").input_ids
    assert ids_upper != ids_lower  # "The" and "the" are different vocabulary entries
    assert ours.tokenize("café") == hf.tokenize("café") == ["caf", "##é"]


def test_do_lower_case_true_is_honoured_for_a_vocab_with_capitals(cased_dir, tmp_path):
    # Same (cased-looking) vocab, but the config asks for lower-casing: transformers lowercases.
    shutil.copy(cased_dir / "vocab.txt", tmp_path / "vocab.txt")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    ours = WordPieceTokenizer.from_dir(tmp_path)
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    assert hf.do_lower_case is True
    for text in ["The Cat", "He went to the Store.", "Éclair Zoë"]:
        _ours_vs_hf(ours, hf, text)
    assert ours.tokenize("The") == ["the"]


@pytest.mark.parametrize("lowercase", [
    True,
    False,
])
def test_vocab_only_dir_matches_transformers_convention(cased_dir, minilm_dir, tmp_path, lowercase):
    # No tokenizer_config.json / tokenizer.json: a vocab with capitals is a cased one.
    src = minilm_dir if lowercase else cased_dir
    shutil.copy(src / "vocab.txt", tmp_path / "vocab.txt")
    ours = WordPieceTokenizer.from_dir(tmp_path)
    assert ours.lowercase is lowercase
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path), do_lower_case=lowercase)
    for text in ["The Cat went to the Store.", "Café Zoë 東京"]:
        _ours_vs_hf(ours, hf, text)


def test_tokenizer_json_normaliser_decides_casing(cased_dir, tmp_path):
    # vocab.txt + tokenizer.json only: the normaliser's "lowercase" is the setting, as in transformers.
    cased = WordPieceTokenizer.from_dir(cased_dir)
    cased.save(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()
    tj = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    tj["normalizer"]["lowercase"] = True
    (tmp_path / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    ours = WordPieceTokenizer.from_dir(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert ours.lowercase is True
    for text in ["The Cat went to the Store.", "He went"]:
        _ours_vs_hf(ours, hf, text, return_token_type_ids=True)


def test_save_keeps_ids_of_a_vocab_with_a_duplicate_line(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nthe\ndog\n", encoding="utf-8")
    (src / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    hf = transformers.BertTokenizerFast.from_pretrained(str(src))
    expected = hf("the cat dog")["input_ids"]  # transformers: the later line wins for "the"
    ours = WordPieceTokenizer.from_dir(src)
    assert ours.encode("the cat dog").input_ids == expected
    ours.save(out)
    assert WordPieceTokenizer.from_dir(out).encode("the cat dog").input_ids == expected
    assert transformers.BertTokenizerFast.from_pretrained(str(out))("the cat dog")["input_ids"] == expected


# ----- trained vocabularies ---------------------------------------------------------------------

def test_train_gives_requested_size_specials_and_continuations(trained):
    ours, _, _, d, _ = trained
    assert abs(ours.vocab_size - TRAINED_SIZE) <= 3
    vocab = [ours.id_to_token(i) for i in range(ours.vocab_size)]
    assert len(set(vocab)) == len(vocab)
    for t in SPECIAL_TOKENS:
        assert ours.token_to_id(t) is not None
    assert ours.special_ids() == {ours.token_to_id(t) for t in SPECIAL_TOKENS} and len(ours.special_ids()) == 5
    cont = [t for t in vocab if t.startswith("##") and len(t) > 2]
    assert len(cont) > 20
    # the saved vocab.txt lists the tokens in id order, one per line
    assert (d / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == vocab
    # and words really are split into a first piece plus ## continuations
    pieces = ours.tokenize(TEXTS[0])
    assert any(p.startswith("##") for p in pieces)
    assert "[UNK]" not in pieces


def test_trained_vocab_is_identical_in_transformers(trained):
    ours, hf_full, hf_bare, _, lowercase = trained
    ids = list(range(ours.vocab_size))
    assert len(hf_full) == len(hf_bare) == ours.vocab_size
    assert ours.convert_ids_to_tokens(ids) == hf_full.convert_ids_to_tokens(ids) == hf_bare.convert_ids_to_tokens(ids)
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (
        hf_bare.pad_token_id, hf_bare.unk_token_id, hf_bare.cls_token_id, hf_bare.sep_token_id,
        hf_bare.mask_token_id)
    assert ours.lowercase is lowercase


def test_trained_tokenizer_encodes_like_transformers(trained):
    ours, hf_full, hf_bare, _, _ = trained
    texts = TEXTS[:40] + ["Unseen words: xylophone, QUIZ, Ärger 東京 [MASK] here", "KAROMI Karomi karomi"]
    for i, text in enumerate(texts):
        pair = texts[-1 - i] if i % 2 else None
        for hf in (hf_full, hf_bare):
            _ours_vs_hf(ours, hf, text, pair)
    a, b = TEXTS[1], TEXTS[2]
    for hf in (hf_full, hf_bare):
        _ours_vs_hf(ours, hf, a, b, truncation="longest_first", max_length=15)
    got = ours.batch(list(zip(TEXTS[3:7], TEXTS[7:11])))
    ref = hf_bare(TEXTS[3:7], TEXTS[7:11], padding=True, truncation=True, max_length=512, return_tensors="pt")
    for k in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(got[k], ref[k]), k


def test_trained_casing_follows_the_lowercase_flag(trained):
    ours, _, _, _, lowercase = trained
    assert (ours.tokenize("KAROMI") == ours.tokenize("karomi")) is lowercase


# ----- errors -----------------------------------------------------------------------------------

def test_from_dir_without_vocab_raises_file_not_found(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        WordPieceTokenizer.from_dir(tmp_path)


def test_vocab_without_mask_token_is_rejected(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        WordPieceTokenizer.from_dir(tmp_path)


def test_truncation_is_the_encode_s_own_and_never_left_for_the_next_call(uncased):
    """The Rust tokenizer keeps its truncation as state: after an encode cut at 16, tokenize() of a long text was cut
    too ("bank" past the cut was "not in the sentence"), and two sessions encoding at once could take each other's."""
    import sys
    import threading

    uncased = uncased[0]
    text = "the river " + "x " * 60 + "bank"
    whole = uncased.tokenize(text)
    uncased.encode(text, max_length=16)
    assert uncased.tokenize(text) == whole and whole[-1] == "bank"
    wrong = []

    def encode(max_length):
        for _ in range(300):
            n = len(uncased.encode_batch([text] * 8, max_length)[0].input_ids)
            if n != (max_length or len(whole) + 2):
                wrong.append((max_length, n))

    threads = [threading.Thread(target=encode, args=(m,)) for m in (16, None, 40)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often, as a busy server's sessions may (324 of 900 wrong)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not wrong, wrong[:5]


def test_a_vocab_with_a_repeated_line_sizes_its_model_by_its_lines(tmp_path):
    """A repeated line takes its last line's id (transformers gives the same), past the count of distinct pieces:
    `pretrain --vocab` built embeddings of that count and stopped on an IndexError in the first step."""
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nthe\ndog\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    ours = WordPieceTokenizer.from_dir(tmp_path)
    ids = ours.encode("the cat dog").input_ids
    assert ids == transformers.BertTokenizerFast.from_pretrained(str(tmp_path))("the cat dog")["input_ids"]
    assert ours.vocab_size == 9 and max(ids) < ours.vocab_size  # 8 distinct pieces, ids up to 8
    assert [ours.id_to_token(i) for i in range(ours.vocab_size)][5:] == ["the", "cat", "the", "dog"]
    embeddings = torch.nn.Embedding(ours.vocab_size, 4)
    assert embeddings(torch.tensor(ids)).shape == (len(ids), 4)


def test_vocab_lines_end_where_the_tokenizers_library_ends_them(tmp_path):
    """A token holding U+2028 (or U+0085) was two lines to Python's splitlines and one to the library: save()
    wrote an extra line, every later id moved by one, and the fingerprint said nothing had changed."""
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nx\u2028y\nq\u0085r\ncat\ndog\n",
                                        encoding="utf-8")
    ours = WordPieceTokenizer.from_dir(tmp_path)
    ours.save(tmp_path / "out")
    again = WordPieceTokenizer.from_dir(tmp_path / "out")
    assert again.encode("cat dog").input_ids == ours.encode("cat dog").input_ids == [2, 7, 8, 3]
    assert again.vocab_size == ours.vocab_size == 9


def test_a_vocab_saved_with_a_byte_order_mark_is_said_so(tmp_path, minilm_dir):
    """Notepad's UTF-8 begins with a BOM, which made the first line "\\ufeff[PAD]": the sentence was "the
    vocabulary has no [PAD] token" of a file that has one."""
    (tmp_path / "vocab.txt").write_text("\ufeff" + (minilm_dir / "vocab.txt").read_text(encoding="utf-8"),
                                        encoding="utf-8")
    with pytest.raises(ValueError, match="^vocab.txt begins with a byte-order mark .*: save it as UTF-8 without one$"):
        WordPieceTokenizer.from_dir(tmp_path)


def test_the_lower_casing_setting_is_read_as_the_user_wrote_it(cased_dir, tmp_path):
    """do_lower_case "false" (a string) read as True, bool("false"); a cased vocab of capitals outside A-Z
    (É, Ω) was judged uncased and its capitals read as [UNK]."""
    shutil.copy(cased_dir / "vocab.txt", tmp_path / "vocab.txt")
    for written, lowercase in (('"false"', False), ('"True"', True), ("false", False)):
        (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": %s}' % written)
        assert WordPieceTokenizer.from_dir(tmp_path).lowercase is lowercase
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": "no"}')
    with pytest.raises(ValueError, match="do_lower_case must be true or false, not 'no'"):
        WordPieceTokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nÉa\nΩ\nb\n", encoding="utf-8")
    ours = WordPieceTokenizer.from_dir(tmp_path)
    assert ours.lowercase is False and ours.tokenize("Éa Ω") == ["Éa", "Ω"]


def test_a_vocabulary_with_gaps_in_its_ids_reads_a_gap_as_no_piece():
    """ids up to the largest count (vocab_size), and one that no piece has is read as "" (a None stopped the
    continuation pieces' scan and the vocabularies' comparison)."""
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)} | {"cat": 7, "##s": 9}
    ours = WordPieceTokenizer(vocab)
    assert ours.vocab_size == 10 and ours.id_to_token(6) == "" and ours.id_to_token(9) == "##s"
    from bert_explorer.data.pretraining import continuation_ids
    assert continuation_ids(ours) == {9}
