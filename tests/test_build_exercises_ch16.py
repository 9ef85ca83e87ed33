"""Chapter 16, the capstone: each piece's check refuses the package's own piece, names the common mistakes, and
refuses copies of K/V; the chapter's last check (``same_tokens_as_package``) fails when the package's attention or
decoder is what runs, names the first differing token of a wrong decoder, and accepts a near-tie only.

``CHEATS`` (collected by tests/test_exercises_build.py): an answer per piece that calls the package's own piece, or
whose lower pieces do.
"""
import contextlib
import io

import attention_book.checks as checks
import matplotlib
import nbformat
import pytest
import torch
import torch.nn.functional as F
from attention_book.checks import CheckFailed
from attention_book.checks.capstone import NEAR_TIE, _compare_tokens
from attention_book.grouped_sdpa import grouped_query_sdpa
from attention_book.llama.capstone import decoder_weights
from attention_book.llama.decoder import SwiGLU, rms_norm
from attention_book.masks import causal_mask
from attention_book.rope import Rope
from conftest import ROOT
from exercise_answers import fails, model_solutions

matplotlib.use("Agg")

CHAPTER = ROOT / "book" / "16_your_decoder.ipynb"


SOLUTIONS = model_solutions(CHAPTER.name)


def with_piece(**pieces):
    """Another copy of the model solutions, with some pieces replaced (the later pieces call the new ones)."""
    namespace = model_solutions(CHAPTER.name)
    namespace.update(pieces)
    return namespace


def sdpa_attention(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def package_grouped(q, k, v):
    L, S = q.shape[2], k.shape[2]
    return grouped_query_sdpa(q, k, v, causal_mask(L, S))


def concatenating_cache(cache, k, v):
    n = cache["length"]
    keys = torch.cat((cache["k"][:, :, :n], k), dim=2)
    values = torch.cat((cache["v"][:, :, :n], v), dim=2)
    cache["k"][:, :, :n + k.shape[2]], cache["v"][:, :, :n + k.shape[2]] = keys, values
    cache["length"] = n + k.shape[2]
    return keys, values


def package_rope(x, start, base):
    return Rope(x.shape[-1], base)(x, start)


def package_rms_norm(x, weight, eps):
    return rms_norm(x, weight, eps)


def package_swiglu(x, w_gate, w_up, w_down):
    mlp = SwiGLU(w_gate.shape[1], w_gate.shape[0])
    with torch.no_grad():
        mlp.gate_up.weight.copy_(torch.cat((w_gate, w_up)))
        mlp.down.weight.copy_(w_down)
    return mlp(x)


CHEATING = with_piece(grouped_causal_attention=package_grouped)  # every piece above it calls the package's GQA

CHEATS = {
    "check_masked_attention": sdpa_attention,
    "check_cache_append": concatenating_cache,
    "check_grouped_causal_attention": package_grouped,
    "check_rope_halves": package_rope,
    "check_rms_normalise": package_rms_norm,
    "check_swiglu_mlp": package_swiglu,
    "check_attention_sublayer": CHEATING["attention_sublayer"],
    "check_decoder_block": CHEATING["decoder_block"],
    "check_decoder_logits": CHEATING["decoder_logits"],
    "check_greedy_generate": CHEATING["greedy_generate"],
}

CHECKED = ["masked_attention", "to_heads", "from_heads", "cache_append", "grouped_causal_attention", "rope_halves",
           "rms_normalise", "swiglu_mlp", "attention_sublayer", "decoder_block", "decoder_logits", "greedy_generate"]


def test_the_chapter_has_at_least_8_checked_pieces_each_from_a_chapter():
    nb = nbformat.read(CHAPTER, as_version=4)
    titles = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown"
              and c.source.startswith("### Exercise")]
    checked = [c for c in nb.cells if "exercise-check" in c.metadata.get("tags", [])]
    assert len(checked) >= 8 and len(titles) == len(checked)
    assert all("(chapter" in title for title in titles), titles


@pytest.mark.parametrize("check", sorted(CHEATS))
def test_a_lower_piece_of_the_package_is_refused_too(check):
    message = fails(getattr(checks, check), CHEATS[check])
    assert "the exercise is to write that step yourself" in message, message


# Wrong answers: each gets its named mistake.

def attention_inverted(q, k, v, mask):
    return SOLUTIONS["masked_attention"](q, k, v, ~mask)


def attention_nan_rows(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def to_heads_reshaped(x, n_heads):
    B, L, width = x.shape
    return x.reshape(B, n_heads, L, width // n_heads)


def cache_whole_buffer(cache, k, v):
    SOLUTIONS["cache_append"](cache, k, v)
    return cache["k"], cache["v"]


def cache_copies(cache, k, v):
    keys, values = SOLUTIONS["cache_append"](cache, k, v)
    return keys.clone(), values.clone()


def cache_forgets_length(cache, k, v):
    keys, values = SOLUTIONS["cache_append"](cache, k, v)
    cache["length"] -= k.shape[2]
    return keys, values


def grouped_top_left(q, k, v):
    B, h, L, d = q.shape
    g, S = k.shape[1], k.shape[2]
    folded = q.reshape(B, g, (h // g) * L, d)
    mask = torch.ones(L, S, dtype=torch.bool).tril().repeat(h // g, 1)
    return SOLUTIONS["masked_attention"](folded, k, v, mask).reshape(B, h, L, d)


def grouped_round_robin(q, k, v):
    B, h, L, d = q.shape
    g, S = k.shape[1], k.shape[2]
    k, v = k.repeat(1, h // g, 1, 1), v.repeat(1, h // g, 1, 1)  # no repeat_interleave: tiled
    return SOLUTIONS["masked_attention"](q, k, v, torch.ones(L, S, dtype=torch.bool).tril(S - L))


def grouped_by_expanding(q, k, v):
    """The right values, through a copy of K and V for every query head (expand, then reshape, copies)."""
    B, h, L, d = q.shape
    g, S = k.shape[1], k.shape[2]
    k = k[:, :, None].expand(B, g, h // g, S, d).reshape(B, h, S, d)
    v = v[:, :, None].expand(B, g, h // g, S, d).reshape(B, h, S, d)
    return SOLUTIONS["masked_attention"](q, k, v, torch.ones(L, S, dtype=torch.bool).tril(S - L))


def grouped_repeat_interleave(q, k, v):
    group = q.shape[1] // k.shape[1]
    L, S = q.shape[2], k.shape[2]
    return SOLUTIONS["masked_attention"](q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                         torch.ones(L, S, dtype=torch.bool).tril(S - L))


def rope_from_zero(x, start, base):
    return SOLUTIONS["rope_halves"](x, 0, base)


def rope_in_pairs(x, start, base):
    d = x.shape[-1]
    theta = 1.0 / base ** (torch.arange(0, d, 2).float() / d)
    angles = torch.arange(start, start + x.shape[2]).float()[:, None] * theta
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()), -1).flatten(-2)


def rms_as_layer_norm(x, weight, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, eps=eps)


def swiglu_on_up(x, w_gate, w_up, w_down):
    return F.linear(F.linear(x, w_gate) * F.silu(F.linear(x, w_up)), w_down)


MISTAKES = [
    ("check_masked_attention", attention_inverted, "the mask is used the wrong way round"),
    ("check_masked_attention", attention_nan_rows, "must get zeros, not NaN"),
    ("check_to_heads", to_heads_reshaped, "mixes the tokens and the heads"),
    ("check_cache_append", cache_whole_buffer, "returning the whole buffer"),
    ("check_cache_append", cache_copies, "a copy, not a view of the cache's buffer"),
    ("check_cache_append", cache_forgets_length, "cache['length'] is"),
    ("check_grouped_causal_attention", grouped_top_left, "aligned top-left"),
    ("check_grouped_causal_attention", grouped_round_robin, "round-robin"),
    ("check_rope_halves", rope_from_zero, "the positions start at 0"),
    ("check_rope_halves", rope_in_pairs, "the pairs layout"),
    ("check_rms_normalise", rms_as_layer_norm, "that is LayerNorm"),
    ("check_swiglu_mlp", swiglu_on_up, "SiLU applied to the up projection"),
]


@pytest.mark.parametrize("check, mistaken, named", MISTAKES, ids=lambda m: getattr(m, "__name__", ""))
def test_a_wrong_piece_gets_a_clear_message(check, mistaken, named):
    message = fails(getattr(checks, check), mistaken)
    assert named in message, message


def test_a_copy_of_k_and_v_per_query_head_fails_on_its_bytes():
    message = fails(checks.check_grouped_causal_attention, grouped_by_expanding)
    assert "bytes of new tensors" in message and "no copy of k and v" in message, message


def grouped_by_broadcasting(q, k, v):
    """The right values, by a matmul that broadcasts k and v across a group's query heads (which copies them)."""
    B, h, L, d = q.shape
    g, S = k.shape[1], k.shape[2]
    scores = q.view(B, g, h // g, L, d) @ k[:, :, None].transpose(-2, -1) / d ** 0.5  # (B, g, h // g, L, S)
    scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(S - L), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v[:, :, None]).view(B, h, L, d)


def test_a_matmul_that_broadcasts_k_fails_and_says_why():
    message = fails(checks.check_grouped_causal_attention, grouped_by_broadcasting)
    assert "bytes of new tensors" in message and "A matmul whose operands broadcast copies too" in message, message


def test_repeat_interleave_is_refused():
    message = fails(checks.check_grouped_causal_attention, grouped_repeat_interleave)
    assert "calls torch.Tensor.repeat_interleave, which copies K and V" in message, message


def test_torch_cat_is_refused_in_the_cache():
    message = fails(checks.check_cache_append, concatenating_cache)
    assert "calls torch.cat, which the exercise says not to call" in message, message


def test_a_wrong_later_piece_is_caught_on_the_tiny_models():
    """A sublayer without RoPE on the keys: the sublayer's check, and so every later one, fails."""
    def no_rope_on_keys(x, start, base, real=SOLUTIONS["rope_halves"]):
        return real(x, start, base) if x.shape[1] == 4 else x  # the tiny models' queries have 4 heads, keys 2
    wrong = with_piece(rope_halves=no_rope_on_keys)
    for name in ("attention_sublayer", "decoder_block", "decoder_logits"):
        message = fails(getattr(checks, f"check_{name}"), wrong[name])
        assert f"your {name} on x" in message or f"your {name} on ids" in message, message
    assert "the tokens first differ" in fails(checks.check_greedy_generate, wrong["greedy_generate"])


def test_keys_cached_unrotated_fail_though_the_output_is_right():
    """Keys cached before RoPE, the whole cache rotated again from position 0 at every call: the output is right,
    the cache is not what the exercise says (and a cache-sized tensor is made at every step)."""
    def sublayer_caching_unrotated_keys(x, layer, cache, config, ns=SOLUTIONS):
        q = ns["to_heads"](F.linear(x, layer.w_q), config.n_heads)
        k = ns["to_heads"](F.linear(x, layer.w_k), config.n_kv_heads)
        v = ns["to_heads"](F.linear(x, layer.w_v), config.n_kv_heads)
        start = cache["length"]
        keys, values = ns["cache_append"](cache, k, v)
        q = ns["rope_halves"](q, start, config.rope_base)
        keys = ns["rope_halves"](keys, 0, config.rope_base)  # the whole cache, rotated again
        out = ns["grouped_causal_attention"](q, keys, values)
        return F.linear(ns["from_heads"](out), layer.w_o)
    message = fails(checks.check_attention_sublayer, sublayer_caching_unrotated_keys)
    assert "the keys in the cache" in message and "before RoPE rotates them" in message, message
    wrong = with_piece(attention_sublayer=sublayer_caching_unrotated_keys)
    message = fails(checks.check_decoder_block, wrong["decoder_block"])
    assert "the keys in the cache" in message, message


def test_logits_of_every_position_fail_on_their_bytes():
    def logits_of_every_position(ids, weights, caches, ns=SOLUTIONS):
        x = weights.embedding[ids]
        for layer, cache in zip(weights.layers, caches, strict=True):
            x = ns["decoder_block"](x, layer, cache, weights.config)
        logits = F.linear(ns["rms_normalise"](x, weights.norm, weights.config.rms_eps), weights.embedding)
        return logits[:, -1]  # (B, L, V) made, one row kept
    message = fails(checks.check_decoder_logits, logits_of_every_position)
    assert "a (B, L, V) tensor" in message and "the logits of all 16 positions" in message, message


def test_an_embedding_by_a_one_hot_fails_on_its_bytes_and_the_message_says_so():
    def logits_by_one_hot(ids, weights, caches, ns=SOLUTIONS):
        x = F.one_hot(ids, weights.config.vocab_size).float() @ weights.embedding  # (B, L, V) made
        for layer, cache in zip(weights.layers, caches, strict=True):
            x = ns["decoder_block"](x, layer, cache, weights.config)
        return F.linear(ns["rms_normalise"](x[:, -1], weights.norm, weights.config.rms_eps), weights.embedding)
    message = fails(checks.check_decoder_logits, logits_by_one_hot)
    assert "a one-hot of the ids" in message and "computed for nothing" not in message, message


def test_repeat_interleave_is_refused_in_the_sublayer_and_the_block():
    """K/V copied per query head, with a plain causal mask, skipping exercise 5's fold: refused in the pieces
    built on it."""
    wrong = with_piece(grouped_causal_attention=grouped_repeat_interleave)
    for name in ("attention_sublayer", "decoder_block"):
        message = fails(getattr(checks, f"check_{name}"), wrong[name])
        assert "calls torch.Tensor.repeat_interleave, which copies K and V" in message, message


def attention_minus_1e9(q, k, v, mask):
    scores = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, -1e9)
    return torch.softmax(scores, dim=-1) @ v


def block_post_norm(x, layer, cache, config, ns=SOLUTIONS):
    h = ns["rms_normalise"](x + ns["attention_sublayer"](x, layer, cache, config), layer.attention_norm,
                            config.rms_eps)
    return ns["rms_normalise"](h + ns["swiglu_mlp"](h, layer.w_gate, layer.w_up, layer.w_down), layer.mlp_norm,
                               config.rms_eps)


@pytest.mark.parametrize("check, answer, named", [
    ("check_masked_attention", attention_minus_1e9, "a query with no allowed key (here the first query)"),
    ("check_attention_sublayer", with_piece(rope_halves=rope_from_zero)["attention_sublayer"],
     "as if x's first token sat at position 0"),
    ("check_attention_sublayer", with_piece(grouped_causal_attention=grouped_top_left)["attention_sublayer"],
     "aligned top-left"),
    ("check_decoder_block", block_post_norm, "post-norm"),
], ids=["minus_1e9", "rope_from_zero", "top_left", "post_norm"])
def test_more_named_mistakes(check, answer, named):
    message = fails(getattr(checks, check), answer)
    assert named in message, message


# Loops that give the right tokens without the cached loop, written as a learner's cell: they call the chapter's
# decoder_logits and empty_cache by name.
LOOP_WITHOUT_A_CACHE = """
def greedy_generate(prompt, weights, n_new):
    config, tokens = weights.config, prompt
    for _ in range(n_new):  # the whole sequence again at every step, into fresh caches
        caches = [empty_cache(1, config.n_kv_heads, tokens.shape[1], config.d_head) for _ in weights.layers]
        token = decoder_logits(tokens, weights, caches).argmax(dim=-1, keepdim=True)
        tokens = torch.cat((tokens, token), dim=1)
        if token.item() == config.eos_id:
            break
    return tokens
"""

LOOP_WITH_FRESH_CACHES = """
def greedy_generate(prompt, weights, n_new):
    config, tokens = weights.config, prompt
    caches = [empty_cache(1, config.n_kv_heads, prompt.shape[1] + n_new, config.d_head) for _ in weights.layers]
    logits = decoder_logits(prompt, weights, caches)
    for _ in range(n_new):
        token = logits.argmax(dim=-1, keepdim=True)
        tokens = torch.cat((tokens, token), dim=1)
        if token.item() == config.eos_id:
            break
        caches = [empty_cache(1, config.n_kv_heads, prompt.shape[1] + n_new, config.d_head) for _ in weights.layers]
        decoder_logits(tokens[:, :-1], weights, caches)  # refilled, then the new token alone
        logits = decoder_logits(token, weights, caches)
    return tokens
"""

LOOP_WITHOUT_DECODER_LOGITS = """
def greedy_generate(prompt, weights, n_new):
    config = weights.config
    caches = [empty_cache(1, config.n_kv_heads, prompt.shape[1] + n_new, config.d_head) for _ in weights.layers]
    tokens, ids = prompt, prompt
    for _ in range(n_new):
        x = weights.embedding[ids]
        for layer, cache in zip(weights.layers, caches, strict=True):
            x = decoder_block(x, layer, cache, config)
        ids = F.linear(rms_normalise(x[:, -1], weights.norm, config.rms_eps), weights.embedding).argmax(-1, True)
        tokens = torch.cat((tokens, ids), dim=1)
        if ids.item() == config.eos_id:
            break
    return tokens
"""


@pytest.mark.parametrize("source, named", [
    (LOOP_WITHOUT_A_CACHE, "call 2 of decoder_logits has ids of shape (1, 3)"),
    (LOOP_WITH_FRESH_CACHES, "call 2 of decoder_logits has ids of shape (1, 2)"),
    (LOOP_WITHOUT_DECODER_LOGITS, "it never calls decoder_logits"),
], ids=["no cache", "fresh caches", "no decoder_logits"])
def test_a_loop_that_is_not_the_cached_loop_fails(source, named):
    namespace = model_solutions(CHAPTER.name)
    exec(compile(source, "<a learner's cell>", "exec"), namespace)
    message = fails(checks.check_greedy_generate, namespace["greedy_generate"])
    assert named in message, message
    assert namespace["decoder_logits"] is namespace["decoder_logits"].__globals__["decoder_logits"]  # restored


# The token comparison: equal, a near-tie, a real difference.

def test_tokens_that_differ_at_a_near_tie_pass_and_say_so():
    expected = torch.tensor([[5, 6, 1, 2]])
    got = torch.tensor([[5, 6, 3, 0]])
    logits = torch.zeros(8)
    logits[1], logits[3] = 10.0, 10.0 - NEAR_TIE / 2
    said = _compare_tokens("yours", "a prompt", expected, got, lambda tokens: logits)
    assert "near-tie" in said and "position 2" in said
    assert _compare_tokens("yours", "a prompt", expected, expected.clone(), lambda tokens: logits) is None


def test_tokens_that_differ_without_a_tie_fail_naming_the_position_and_both_tokens():
    expected, got = torch.tensor([[5, 6, 1, 2]]), torch.tensor([[5, 6, 3, 0]])
    logits = torch.zeros(8)
    logits[1], logits[3] = 10.0, 9.0
    with pytest.raises(CheckFailed, match="first differ at position 2 .*expected token id 1, got 3"):
        _compare_tokens("yours", "a prompt", expected, got, lambda tokens: logits)
    with pytest.raises(CheckFailed, match="then one sequence stops"):
        _compare_tokens("yours", "a prompt", expected, got[:, :2], lambda tokens: logits)


# The chapter's last check, with SmolLM2-135M (marker model).

PROMPT = torch.tensor([[1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]])


def test_the_weights_are_the_models_own_tensors(smollm2):
    weights = decoder_weights(smollm2)
    assert weights.layers[3].w_q.data_ptr() == smollm2.layers[3].attention.q_proj.weight.data_ptr()
    assert weights.layers[3].w_up.untyped_storage().data_ptr() == \
        smollm2.layers[3].mlp.gate_up.weight.untyped_storage().data_ptr()
    assert not weights.embedding.requires_grad and weights.nbytes() == smollm2.weight_bytes()


def test_the_model_solution_generates_the_packages_tokens(smollm2):
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        tokens = checks.same_tokens_as_package(SOLUTIONS["greedy_generate"], decoder_weights(smollm2), smollm2,
                                               PROMPT, 6)
    assert shown.getvalue().startswith("✓ your decoder generated the same 6 tokens"), shown.getvalue()
    assert tokens.shape == (1, PROMPT.shape[1] + 6)


def test_the_last_check_fails_when_the_packages_attention_runs(smollm2):
    weights = decoder_weights(smollm2)

    def the_package_generates(prompt, weights, n_new):
        from attention_book.llama.generate import generate_greedy

        return generate_greedy(smollm2, prompt, n_new)

    for answer, refused in ((CHEATING["greedy_generate"], "(grouped_query_sdpa|scaled_dot_product_attention)"),
                            (the_package_generates, "generate_greedy"),
                            (with_piece(masked_attention=sdpa_attention)["greedy_generate"],
                             "scaled_dot_product_attention")):
        with pytest.raises(CheckFailed, match=f"calls .*{refused}.*the exercise is to write that step yourself"):
            checks.same_tokens_as_package(answer, weights, smollm2, PROMPT, 3)


def test_the_last_check_names_the_first_wrong_token(smollm2):
    wrong = with_piece(rope_halves=rope_in_pairs)["greedy_generate"]  # the weights are laid out for halves
    with pytest.raises(CheckFailed, match=r"first differ at position \d+ \(the prompt included\): expected token id"):
        checks.same_tokens_as_package(wrong, decoder_weights(smollm2), smollm2, PROMPT, 6)


def test_the_last_check_refuses_a_loop_without_its_cache(smollm2):
    namespace = model_solutions(CHAPTER.name)
    exec(compile(LOOP_WITHOUT_A_CACHE, "<a learner's cell>", "exec"), namespace)
    with pytest.raises(CheckFailed, match=r"call 2 of decoder_logits has ids of shape \(1, 17\)"):
        checks.same_tokens_as_package(namespace["greedy_generate"], decoder_weights(smollm2), smollm2, PROMPT, 3)


def test_from_heads_by_view_fails_on_a_contiguous_input_as_a_plain_product_of_weights_and_values_returns():
    """The learner's own error, with a note of the input (_call): the contiguous one."""
    with pytest.raises(RuntimeError, match="view size is not compatible") as error:
        checks.check_from_heads(lambda y: y.transpose(1, 2).view(y.shape[0], y.shape[2], -1))
    assert "tensor of shape (2, 3, 3, 2)" in " ".join(getattr(error.value, "__notes__", [])), error.value


def test_cache_append_must_refuse_tokens_that_do_not_fit():
    def silent(cache, k, v):  # the model solution without its ValueError
        start, end = cache["length"], cache["length"] + k.shape[2]
        cache["k"][:, :, start:end], cache["v"][:, :, start:end] = k, v
        cache["length"] = end
        return cache["k"][:, :, :end], cache["v"][:, :, :end]

    fails(checks.check_cache_append, silent, "a full cache", "it raised no ValueError")


def grouped_folded_as_consecutive(q, k, v):
    B, h, L, d = q.shape
    g, S = k.shape[1], k.shape[2]
    rows = (h // g) * L
    mask = torch.arange(S) <= torch.arange(S - rows, S)[:, None]  # the folded rows as consecutive queries
    return SOLUTIONS["masked_attention"](q.reshape(B, g, rows, d), k, v, mask).reshape(B, h, L, d)


def grouped_token_major_fold(q, k, v):
    """A right fold whose positions come from repeat_interleave on a vector: allowed (it copies no K/V)."""
    B, h, L, d = q.shape
    g, S = k.shape[1], k.shape[2]
    folded = q.view(B, g, h // g, L, d).transpose(2, 3).reshape(B, g, L * (h // g), d)  # token-major
    positions = torch.arange(S - L, S).repeat_interleave(h // g)
    out = SOLUTIONS["masked_attention"](folded, k, v, torch.arange(S) <= positions[:, None])
    return out.view(B, g, L, h // g, d).transpose(2, 3).reshape(B, h, L, d)


def test_the_fold_with_positions_not_reset_per_head_is_told_so():
    message = fails(checks.check_grouped_causal_attention, grouped_folded_as_consecutive)
    assert "as that many consecutive queries" in message.split("Likely mistake: ")[1], message


def test_repeat_interleave_on_a_vector_of_positions_runs():
    checks.check_grouped_causal_attention(grouped_token_major_fold)


def sublayer_rope_after_the_append(x, layer, cache, config, ns=SOLUTIONS):
    q = ns["to_heads"](F.linear(x, layer.w_q), config.n_heads)
    k = ns["to_heads"](F.linear(x, layer.w_k), config.n_kv_heads)
    v = ns["to_heads"](F.linear(x, layer.w_v), config.n_kv_heads)
    start = cache["length"] + x.shape[1]  # the length after the append: one chunk too far
    k, v = ns["cache_append"](cache, ns["rope_halves"](k, start, config.rope_base), v)
    out = ns["grouped_causal_attention"](ns["rope_halves"](q, start, config.rope_base), k, v)
    return F.linear(ns["from_heads"](out), layer.w_o)


def sublayer_reading_no_cache(x, layer, cache, config, ns=SOLUTIONS):
    start = cache["length"]
    q = ns["rope_halves"](ns["to_heads"](F.linear(x, layer.w_q), config.n_heads), start, config.rope_base)
    k = ns["rope_halves"](ns["to_heads"](F.linear(x, layer.w_k), config.n_kv_heads), start, config.rope_base)
    v = ns["to_heads"](F.linear(x, layer.w_v), config.n_kv_heads)
    ns["cache_append"](cache, k, v)  # written, never read
    return F.linear(ns["from_heads"](ns["grouped_causal_attention"](q, k, v)), layer.w_o)


def logits_with_one_cache_for_every_layer(ids, weights, caches, ns=SOLUTIONS):
    x = weights.embedding[ids]
    for layer in weights.layers:
        x = ns["decoder_block"](x, layer, caches[0], weights.config)
    return F.linear(ns["rms_normalise"](x[:, -1], weights.norm, weights.config.rms_eps), weights.embedding)


@pytest.mark.parametrize("check, answer, named", [
    ("check_attention_sublayer", sublayer_rope_after_the_append, "from the cache's length after x was appended"),
    ("check_attention_sublayer", sublayer_reading_no_cache, "were never read"),
    ("check_decoder_logits", logits_with_one_cache_for_every_layer, "every layer keeps its own cache"),
], ids=["rope_after_append", "cache_never_read", "one_cache"])
def test_the_learners_mistakes_in_the_later_pieces_are_named(check, answer, named):
    message = fails(getattr(checks, check), answer)
    assert named in message, message


def test_the_fold_whose_rows_count_on_from_the_first_querys_position_is_told_so():
    def from_the_first_query(q, k, v):
        B, h, L, d = q.shape
        g, S = k.shape[1], k.shape[2]
        rows = (h // g) * L
        mask = torch.arange(S) <= (torch.arange(rows) + S - L)[:, None]
        return SOLUTIONS["masked_attention"](q.reshape(B, g, rows, d), k, v, mask).reshape(B, h, L, d)

    message = fails(checks.check_grouped_causal_attention, from_the_first_query)
    assert "as that many consecutive queries" in message.split("Likely mistake: ")[1], message


def rope_theta_without_the_2(x, start, base):
    d = x.shape[-1]
    angles = torch.arange(start, start + x.shape[2]).float()[:, None] * base ** (-torch.arange(d // 2).float() / d)
    a, b = x[..., :d // 2], x[..., d // 2:]
    return torch.cat((a * angles.cos() - b * angles.sin(), a * angles.sin() + b * angles.cos()), dim=-1)


def block_adding_to_the_normalised_input(x, layer, cache, config, ns=SOLUTIONS):
    a = ns["rms_normalise"](x, layer.attention_norm, config.rms_eps)
    h = a + ns["attention_sublayer"](a, layer, cache, config)
    return h + ns["swiglu_mlp"](ns["rms_normalise"](h, layer.mlp_norm, config.rms_eps), layer.w_gate, layer.w_up,
                                layer.w_down)


@pytest.mark.parametrize("check, answer, named", [
    ("check_rope_halves", rope_theta_without_the_2, "the exponent is -2i / d_head"),
    ("check_decoder_block", block_adding_to_the_normalised_input, "added to the normalised x"),
], ids=["theta", "normalised_residual"])
def test_a_third_learners_mistakes_are_named(check, answer, named):
    assert named in fails(getattr(checks, check), answer)
