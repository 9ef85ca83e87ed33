"""Tiny GGUF files for the llama tests, written with gguf's own GGUFWriter: a Llama-architecture model with random
weights (a few quantisation types), or a file of another architecture."""
import numpy as np

TINY = dict(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, vocab_size=40)


def write_gguf(path, arch="llama", skip=(), qtype_of=None, **sizes):
    """A GGUF file at ``path`` with a tiny random decoder of architecture ``arch``. ``skip``: tensor names (or the
    metadata key "vocab_size") to leave out. ``qtype_of(name)``: each matrix's quantisation type name (default Q8_0
    for the embedding, Q4_1 otherwise). Returns the dict name -> the fp32 numbers that were quantised."""
    import gguf

    s = TINY | sizes
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_block_count(s["n_layers"])
    writer.add_context_length(128)
    writer.add_embedding_length(s["d_model"])
    writer.add_feed_forward_length(s["d_ff"])
    writer.add_head_count(s["n_heads"])
    writer.add_head_count_kv(s["n_kv_heads"])
    writer.add_rope_freq_base(10_000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    if "vocab_size" not in skip:
        writer.add_vocab_size(s["vocab_size"])
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
    d, d_kv = s["d_model"], s["d_model"] // s["n_heads"] * s["n_kv_heads"]
    shapes = {"token_embd.weight": (s["vocab_size"], d), "output_norm.weight": (d,)}
    for i in range(s["n_layers"]):
        shapes |= {f"blk.{i}.attn_norm.weight": (d,), f"blk.{i}.attn_q.weight": (d, d),
                   f"blk.{i}.attn_k.weight": (d_kv, d), f"blk.{i}.attn_v.weight": (d_kv, d),
                   f"blk.{i}.attn_output.weight": (d, d), f"blk.{i}.ffn_norm.weight": (d,),
                   f"blk.{i}.ffn_gate.weight": (s["d_ff"], d), f"blk.{i}.ffn_up.weight": (s["d_ff"], d),
                   f"blk.{i}.ffn_down.weight": (d, s["d_ff"])}
    qtype_of = qtype_of or (lambda name: "Q8_0" if name == "token_embd.weight" else "Q4_1")
    numbers = {}
    for name, shape in shapes.items():
        if name in skip:
            continue
        x = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        numbers[name] = x
        if len(shape) == 1:
            writer.add_tensor(name, x)
        else:
            qtype = gguf.GGMLQuantizationType[qtype_of(name)]
            writer.add_tensor(name, gguf.quants.quantize(x, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return numbers
