"""Checks for chapter 2's exercises: self-attention, positions, memory."""
import torch

from ..positions import sinusoidal_positions
from ..self_attention import SelfAttentionHead
from ._compare import CheckFailed, _call, _compare, _describe


def check_self_attention(fn):
    """fn(x, W_q, W_k, W_v) -> (out, weights), x (B, L, d_model), each W (d_model, d_head).

    Tried on 3 random inputs and weight matrices; weights and output compared with attention_book.SelfAttentionHead.
    """
    task = "compute q = x @ W_q, k = x @ W_k, v = x @ W_v, then scaled dot-product attention of q, k, v."
    for seed, (B, L, d_model, d_head) in enumerate([(2, 5, 8, 4), (1, 7, 6, 6), (3, 3, 10, 2)]):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            head = SelfAttentionHead(d_model, d_head)
            x = torch.randn(B, L, d_model)
        weights_t = [p.weight.detach().T for p in (head.q_proj, head.k_proj, head.v_proj)]  # (d_model, d_head)
        tried = f"x {tuple(x.shape)}, W_q, W_k, W_v of shape {(d_model, d_head)}"
        result = _call(fn, (x, *weights_t), task)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"your self_attention on {tried}: expected a pair (out, weights), "
                              f"got {_describe(result)}")
        with torch.no_grad():
            out, weights = head(x)
        _compare("your attention weights", tried, weights, result[1], "scale the scores by 1/√d_head")
        _compare("your self-attention output", tried, out, result[0], "out = weights @ (x @ W_v)")
    print("✓ your self_attention matches attention_book.SelfAttentionHead on 3 inputs.")


def check_sinusoidal(fn):
    """fn(L, d_model) -> (L, d_model) sinusoidal position encodings.

    Tried on 4 sizes from (1, 2) to (50, 16); compared with attention_book.sinusoidal_positions.
    """
    task = "column 2i holds sin(p / 10000^(2i / d_model)), column 2i + 1 the cosine of the same angle."
    for L, d_model in [(1, 2), (6, 8), (50, 16), (10, 64)]:
        _compare("your position encoding", f"L={L}, d_model={d_model}", sinusoidal_positions(L, d_model),
                 _call(fn, (L, d_model), task),
                 hint="column 2i is the sine and 2i + 1 the cosine; the exponent is 2i / d_model")
    print("✓ your sinusoidal encoding matches attention_book.sinusoidal_positions for 4 sizes.")


def check_weights_bytes(fn):
    """fn(B, h, L, S, dtype) -> bytes taken by the attention weights of that shape and dtype.

    Tried on 5 shapes in fp16, bf16, fp32 and fp64; compared with the size of a real tensor (Tensor.nbytes).
    """
    task = "multiply the number of weights, B * h * L * S, by the bytes of one element of dtype."
    cases = [(1, 1, 4, 4, torch.float32), (2, 8, 10, 10, torch.float32), (8, 12, 1024, 1024, torch.float16),
             (1, 32, 1, 4096, torch.bfloat16), (4, 2, 3, 5, torch.float64)]
    for B, h, L, S, dtype in cases:
        expected = torch.empty(B, h, L, S, dtype=dtype).nbytes
        got = _call(fn, (B, h, L, S, dtype), task)
        if got != expected:
            raise CheckFailed(f"weights_bytes(B={B}, h={h}, L={L}, S={S}, dtype={dtype}): expected {expected:,}, "
                              f"got {got!r}\nHint: torch.finfo(dtype).bits // 8 gives the bytes per element")
    print(f"✓ weights_bytes matches the real tensors' sizes for {len(cases)} shapes and dtypes.")
