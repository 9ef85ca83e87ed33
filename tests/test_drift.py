"""The code a chapter shows is the code the package runs, and each listing runs on its own.

A chapter cell tagged ``package-source`` defines functions or classes that also live in
``attention_book``; each definition must equal the package's source (after trimming whitespace).
Any other top-level definition in a chapter must not reuse a package name, so nothing drifts untagged.
Each ``package-source`` cell is also run alone, in a fresh namespace, as a reader who copies it would run it, and
what it defines is called on a small input and compared with the package's own (EXERCISES), so a listing that
forgets an import fails here.
"""
import ast
import importlib
import inspect
import pkgutil
import textwrap

import attention_book
import nbformat
import pytest
import torch
from conftest import chapter_paths


def package_objects():
    """Every function and class defined in an attention_book module (not the figures), by name."""
    found = {}
    for info in pkgutil.walk_packages(attention_book.__path__, "attention_book."):
        if info.ispkg or info.name.startswith("attention_book.figures."):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == module.__name__:
                found[name] = obj
    return found


def defining_modules():
    """Name -> the attention_book modules (not the figures) that define a function or class of that name."""
    found = {}
    for info in pkgutil.walk_packages(attention_book.__path__, "attention_book."):
        if info.ispkg or info.name.startswith("attention_book.figures."):
            continue
        for name, obj in vars(importlib.import_module(info.name)).items():
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__ == info.name:
                found.setdefault(name, []).append(info.name)
    return found


def normalise(source: str) -> str:
    lines = [line.rstrip() for line in textwrap.dedent(source).strip().splitlines()]
    return "\n".join(lines)


def definitions(source):
    """(name, source) of each top-level function and class, decorators included (as inspect.getsource gives them)."""
    lines = source.splitlines(keepends=True)
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            found.append((node.name, "".join(lines[start:node.end_lineno])))
    return found


def shown_definitions():
    for path in chapter_paths():
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                tagged = "package-source" in cell.metadata.get("tags", [])
                for name, source in definitions(cell.source):
                    yield pytest.param(path.name, index, tagged, name, source, id=f"{path.stem}-cell{index}-{name}")


@pytest.mark.parametrize("chapter, index, tagged, name, source", list(shown_definitions()))
def test_shown_code_matches_the_package(chapter, index, tagged, name, source):
    objects = package_objects()
    if not tagged:
        assert name not in objects, (
            f"{chapter} cell {index} defines {name}, a name the package has: tag the cell 'package-source' "
            "and show the package's code, or rename it"
        )
        return
    assert name in objects, f"{chapter} cell {index} is tagged package-source but attention_book has no {name}"
    assert normalise(source) == normalise(inspect.getsource(objects[name])), (
        f"{chapter} cell {index}: {name} differs from {inspect.getsourcefile(objects[name])}"
    )


def test_each_name_a_chapter_shows_is_defined_once_in_the_package():
    """A listing is compared with the package's object of its name, so that name must not be ambiguous."""
    shown = {p.values[3] for p in shown_definitions() if p.values[2]}
    twice = {name: modules for name, modules in defining_modules().items() if name in shown and len(modules) > 1}
    assert not twice, f"names shown in chapters and defined in several package modules: {twice}"


def test_chapter_one_shows_the_package_function():
    tagged = [p.values[3] for p in shown_definitions() if p.values[0].startswith("01_") and p.values[2]]
    assert "scaled_dot_product_attention" in tagged


def test_normalise_detects_a_changed_line():
    source = inspect.getsource(attention_book.scaled_dot_product_attention)
    assert normalise(source) != normalise(source.replace("dim=-1", "dim=-2", 1))


# --- Each listing runs on its own ---------------------------------------------------------------------------------

def seeded(make):
    torch.manual_seed(0)
    return make()


def same_module_output(cls_shown, cls_package, make_args, forward_args):
    """Build both classes with the same seed and compare their forward outputs on the same inputs."""
    shown, package = seeded(lambda: cls_shown(*make_args())), seeded(lambda: cls_package(*make_args()))
    with torch.no_grad():
        return shown(*forward_args()), package(*forward_args())


def exercise_attention_layer(shown, package):
    """MHA, GQA and MQA; plain, causal, with weights, and decoding with a cache."""
    x, results = torch.randn(2, 5, 16), ([], [])
    for g in (4, 2, 1):
        layers = seeded(lambda g=g: shown(16, 4, g)), seeded(lambda g=g: package(16, 4, g))
        for layer, found in zip(layers, results, strict=True):
            with torch.no_grad():
                cache = layer.new_cache(2, 5)
                found += [layer(x)[0], layer(x, is_causal=True)[0], *layer(x, is_causal=True, need_weights=True),
                          *[layer(x[:, t:t + 1], cache=cache, is_causal=True)[0] for t in range(5)]]
    return results


def exercise_multi_head_attention(shown, package):
    """Self- and cross-attention; plain, causal with a mask, with weights."""
    x, kv, mask, results = torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.rand(2, 5, 5) < 0.8, ([], [])
    for layer, found in zip((seeded(lambda: shown(16, 4)), seeded(lambda: package(16, 4))), results, strict=True):
        with torch.no_grad():
            found += [layer(x)[0], layer(x, mask=mask, is_causal=True)[0], *layer(x, kv, need_weights=True)]
    return results


def exercise_kv_cache(shown, package):
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    return [c.append(k, v) for c in (shown(1, 2, 4, 5), package(1, 2, 4, 5))]


def exercise_transformer_block(shown, package):
    from attention_book.tiny_transformer import TinyTransformerConfig
    config = TinyTransformerConfig(vocab_size=8, max_len=6, d_model=16, n_layers=1, n_heads=4, mlp=True)
    x = torch.randn(2, 6, 16)
    a, b = same_module_output(shown, package, lambda: (config,), lambda: (x,))
    return a[0], b[0]


def exercise_bert_layer(shown, package):
    from attention_book.bert.loader import BertConfig
    config = BertConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=4, d_ff=32, max_len=8)
    x, mask = torch.randn(2, 5, 16), torch.ones(2, 1, 1, 5, dtype=torch.bool)
    a, b = same_module_output(shown, package, lambda: (config,), lambda: (x, mask))
    return a[0], b[0]


def exercise_previous_two_model(shown, package):
    x = torch.randint(0, 32, (3, 8))
    return same_module_output(shown, package, lambda: (2,), lambda: (x,))


def exercise_heads_side_by_side(shown, package):
    x = torch.randn(3, 8, 16)
    return same_module_output(shown, package, lambda: (16, 2, 8), lambda: (x,))


def exercise_pool(shown, package):
    from attention_book import GroupedQueryAttention
    layer = seeded(lambda: GroupedQueryAttention(16, 4))
    x = torch.randn(1, 3, 16)
    with torch.no_grad():
        return shown(layer, 2)(x)[0], package(layer, 2)(x)[0]


def exercise_pretrain(shown, package):
    x = torch.randint(0, 16, (2, 16))
    models = shown(0, steps=2), package(0, steps=2)  # two training steps each
    with torch.no_grad():
        return [model(x) for model in models]


def exercise_convert_and_uptrain(shown, package):
    from attention_book.experiments.uptraining import pretrain
    model = pretrain(0, steps=2)
    return shown(model, 2, "mean", (0, 2)), package(model, 2, "mean", (0, 2))


def exercise_generate(shown, package):
    """Greedy generation with and without caches, on a small GQA model."""
    from attention_book.tiny_transformer import TinyTransformer, TinyTransformerConfig
    model = seeded(lambda: TinyTransformer(TinyTransformerConfig(vocab_size=8, max_len=9, d_model=16, n_layers=2,
                                                                 n_heads=4, n_kv_heads=2)))
    prompt = torch.randint(0, 8, (2, 3), generator=torch.Generator().manual_seed(0))
    return [[fn(model, prompt, 5, use_cache) for use_cache in (True, False)] for fn in (shown, package)]


def exercise_train(shown, package):
    def copy_batch(generator):
        x = torch.randint(0, 8, (4, 5), generator=generator)
        return x, x

    def model():
        return torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8))
    return [fn(seeded(model), copy_batch, steps=3, progress=False) for fn in (shown, package)]


def exercise_rotate(shown, package):
    """Both layouts, angles for every position (S, d_head / 2) and per sequence (B, 1, S, d_head / 2)."""
    x = torch.randn(2, 3, 5, 8)
    angles = [torch.randn(5, 4), torch.randn(2, 1, 5, 4)]
    return [[fn(x, a.cos(), a.sin(), layout) for a in angles for layout in ("halves", "pairs")]
            for fn in (shown, package)]


def running_update_inputs():
    """A running maximum and sum for two rows (one with nothing seen yet), and a block that raises row 0's maximum."""
    inf = float("inf")
    return torch.tensor([[2.0], [-inf]]), torch.tensor([[1.5], [0.0]]), torch.tensor([[4.0, 0.5], [-inf, -inf]])


def on_qkv(shown, package, h=4, g=2, L=3, S=5, d=8):
    """Both attention functions on the same q (2, h, L, d) and k, v (2, g, S, d)."""
    q, k, v = torch.randn(2, h, L, d), torch.randn(2, g, S, d), torch.randn(2, g, S, d)
    return shown(q, k, v), package(q, k, v)


def exercise_numbers(shown, package):
    """Three Q8_0 blocks and three Q4_1 blocks of random bytes, with real fp16 scales and minima."""
    generator, shown_out, package_out = torch.Generator().manual_seed(0), [], []
    for qtype, block_bytes in (("Q8_0", 34), ("Q4_1", 20)):
        blocks = torch.randint(0, 256, (3, block_bytes), dtype=torch.uint8, generator=generator)
        blocks[:, :4] = torch.rand(3, 2, generator=generator).to(torch.float16).view(torch.uint8)
        shown_out.append(shown(blocks.reshape(-1), qtype))
        package_out.append(package(blocks.reshape(-1), qtype))
    return shown_out, package_out


def small_llama_config():
    from attention_book.llama.loader import LlamaConfig
    return LlamaConfig(n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, d_head=4, d_ff=24, vocab_size=11,
                       rope_base=100.0, rms_eps=1e-5, context_length=16, bos_id=None, eos_id=None)


def exercise_decoder_block(shown, package):
    """A small GQA block with RoPE: a causal forward, a cached prefill and decode steps, and a block that attends to
    another block's keys and values (cross-layer sharing)."""
    from attention_book.rope import Rope
    x, results = torch.randn(2, 6, 16), ([], [])
    for cls, found in zip((shown, package), results, strict=True):
        block = seeded(lambda cls=cls: cls(small_llama_config(), Rope(4, 100.0)))
        sharer = seeded(lambda cls=cls: cls(small_llama_config(), Rope(4, 100.0), makes_kv=False))
        with torch.no_grad():
            found.append(block(x))
            cache = block.attention.new_cache(2, 6)
            found.append(block(x[:, :4], cache))
            found += [block(x[:, t:t + 1], cache) for t in (4, 5)]
            found.append(sharer(x, shared_kv=block.keys_values(x)))
    return results


def exercise_fuse_qkv(shown, package):
    """A GQA layer with RoPE, fused by each, then a cached prefill and two decode steps."""
    from attention_book.attention_layer import GroupedQueryAttention
    from attention_book.rope import Rope
    x, results = torch.randn(2, 6, 16), ([], [])
    for fuse, found in zip((shown, package), results, strict=True):
        layer = seeded(lambda: GroupedQueryAttention(16, 4, 2, bias=False, rope=Rope(4, 100.0)))
        fuse(layer)
        with torch.no_grad():
            cache = layer.new_cache(2, 6)
            found += [layer(x[:, :4], cache=cache, is_causal=True)[0],
                      *[layer(x[:, t:t + 1], cache=cache)[0] for t in (4, 5)]]
    return results


def exercise_attend(shown, package):
    """Both kernels (with and without weights), with a mask and causal without one, h = 4 over g = 2."""
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    mask = torch.rand(5, 5) < 0.7
    return [[*fn(q, k, v, mask, need_weights=True), fn(q, k, v, mask)[0], fn(q, k, v, is_causal=True)[0]]
            for fn in (shown, package)]


def exercise_rope(shown, package):
    """Both layouts, from position 0 and from a start past the table's first size (it grows), and the repr."""
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(0))
    return [[fn(8, 100.0, layout)(x, start) for layout in ("halves", "pairs") for start in (0, 300)] + [repr(fn(8))]
            for fn in (shown, package)]


def exercise_llama_decoder(shown, package):
    """A small decoder: a causal forward, a cached prefill (last_only) and a decode step, its weight bytes, and the
    same after speed_up; and one whose layers share keys and values in pairs (kv_share=2)."""
    ids = torch.randint(0, 11, (2, 5), generator=torch.Generator().manual_seed(0))
    results = ([], [])
    for cls, found in zip((shown, package), results, strict=True):
        for kv_share in (1, 2):
            model = seeded(lambda cls=cls, kv_share=kv_share: cls(small_llama_config(), kv_share=kv_share)).eval()
            with torch.no_grad():
                found.append(model(ids))
                caches = model.new_caches(2, 6)
                found += [model(ids[:, :4], caches, last_only=True), model(ids[:, 4:5], caches),
                          torch.tensor(model.weight_bytes())]
                model.speed_up()
                caches = model.new_caches(2, 6)
                found += [model(ids[:, :4], caches), model(ids[:, 4:5], caches), torch.tensor(model.weight_bytes())]
    return results


def exercise_state_from_gguf(shown, package):
    """A tiny GGUF file's state dict in both layouts, plain and stored for SplitLinear (transposed)."""
    import pathlib
    import tempfile

    pytest.importorskip("gguf")
    from attention_book.llama.loader import GGUFModel
    from llama_files import write_gguf
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "tiny.gguf"
        write_gguf(path)
        file = GGUFModel(path)
        return [[fn(file, layout, transposed) for layout in ("halves", "pairs") for transposed in (False, True)]
                for fn in (shown, package)]


def exercise_generate_greedy(shown, package):
    from attention_book.llama.decoder import LlamaDecoder
    model = seeded(lambda: LlamaDecoder(small_llama_config())).eval()
    prompt = torch.randint(0, 11, (2, 3), generator=torch.Generator().manual_seed(0))
    return shown(model, prompt, 5), package(model, prompt, 5)



def exercise_token_losses(shown, package):
    from attention_book.cache_diet import ring_caches
    from attention_book.llama.decoder import LlamaDecoder
    model = seeded(lambda: LlamaDecoder(small_llama_config())).eval()
    ids = torch.randint(0, 11, (1, 9), generator=torch.Generator().manual_seed(0))
    return ([shown(model, ids, chunk=4), shown(model, ids, 3, ring_caches(model, 4, n_sinks=1))],
            [package(model, ids, chunk=4), package(model, ids, 3, ring_caches(model, 4, n_sinks=1))])


def exercise_latent_attention(shown, package):
    """naive_attention and absorbed_attention: h = 3 heads, L = 2 queries, S = 5 cached rows of d_c + d_rope = 6 + 2."""
    gen = torch.Generator().manual_seed(0)
    args = (torch.randn(2, 3, 2, 4, generator=gen), torch.randn(2, 3, 2, 2, generator=gen),
            torch.randn(2, 5, 8, generator=gen), torch.randn(12, 6, generator=gen), torch.randn(15, 6, generator=gen),
            0.4, torch.ones(2, 5, dtype=torch.bool).tril(diagonal=3))
    return shown(*args), package(*args)


RMS_ARGS = (torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(0)), torch.rand(16) + 0.5, 1e-5)


EXERCISES = {  # shown name -> fn(shown object, package object) -> (what the shown one gave, what the package gave)
    "scaled_dot_product_attention": lambda shown, package: on_qkv(shown, package, h=4, g=4),
    "SelfAttentionHead": lambda shown, package: same_module_output(shown, package, lambda: (16, 8),
                                                                   lambda: (torch.ones(2, 5, 16).cumsum(1),)),
    "sinusoidal_positions": lambda shown, package: (shown(7, 16), package(7, 16)),
    "previous_two": lambda shown, package: (shown(torch.Generator().manual_seed(1)),
                                            package(torch.Generator().manual_seed(1))),
    "HeadsSideBySide": exercise_heads_side_by_side,
    "PreviousTwoModel": exercise_previous_two_model,
    "GroupedQueryAttention": exercise_attention_layer,
    "MultiHeadAttention": exercise_multi_head_attention,
    "TransformerBlock": exercise_transformer_block,
    "BertLayer": exercise_bert_layer,
    "KVCache": exercise_kv_cache,
    "generate": exercise_generate,
    "grouped_query_sdpa": on_qkv,
    "gqa_by_repeating_kv": on_qkv,
    "gqa_with_enable_gqa": on_qkv,
    "pool_kv_heads": exercise_pool,
    "pretrain": exercise_pretrain,
    "convert_and_uptrain": exercise_convert_and_uptrain,
    "train": exercise_train,
    "rope_frequencies": lambda shown, package: (shown(16, 500.0), package(16, 500.0)),
    "running_update": lambda shown, package: [fn(*running_update_inputs()) for fn in (shown, package)],
    "online_softmax": lambda shown, package: [fn(torch.linspace(-3, 4, 33).reshape(3, 11), 4)
                                              for fn in (shown, package)],
    "tiled_attention": lambda shown, package: [[fn(*qkv, is_causal=True, block_q=2, block_k=3), fn(*qkv)]
                                               for qkv in [(torch.randn(2, 4, 3, 8), torch.randn(2, 2, 5, 8),
                                                            torch.randn(2, 2, 5, 8))] for fn in (shown, package)],
    "merge_partials": lambda shown, package: [fn(torch.linspace(-1, 1, 24).reshape(3, 2, 4),
                                                 torch.tensor([[[0.5], [-1.0]], [[2.0], [0.0]], [[-3.0], [1.0]]]))
                                              for fn in (shown, package)],
    "attend_chunks": lambda shown, package: [fn(torch.randn(2, 1, 3, 8, generator=torch.Generator().manual_seed(0)),
                                                *torch.randn(2, 2, 4, 5, 8, generator=torch.Generator().manual_seed(1)),
                                                0.3) for fn in (shown, package)],
    "split_kv_decode": lambda shown, package: on_qkv(lambda q, k, v: shown(q, k, v, n_splits=2),
                                                     lambda q, k, v: package(q, k, v, n_splits=2), L=1),
    "rotate": exercise_rotate,
    "_numbers": exercise_numbers,
    "rms_norm": lambda shown, package: (shown(*RMS_ARGS), package(*RMS_ARGS)),
    "RMSNorm": lambda shown, package: same_module_output(shown, package, lambda: (16,), lambda: RMS_ARGS[:1]),
    "SwiGLU": lambda shown, package: same_module_output(shown, package, lambda: (16, 24), lambda: RMS_ARGS[:1]),
    "DecoderBlock": exercise_decoder_block,
    "fuse_qkv": exercise_fuse_qkv,
    "attend": exercise_attend,
    "generate_greedy": exercise_generate_greedy,
    "Rope": exercise_rope,
    "LlamaDecoder": exercise_llama_decoder,
    "state_from_gguf": exercise_state_from_gguf,
    "pairs_to_halves_rows": lambda shown, package: (shown(torch.arange(48.0).reshape(12, 4), 3),
                                                    package(torch.arange(48.0).reshape(12, 4), 3)),
    "naive_attention": exercise_latent_attention,
    "absorbed_attention": exercise_latent_attention,
    "window_mask": lambda shown, package: [[fn(5, 7, 3, n_sinks) for n_sinks in (0, 2)] for fn in (shown, package)],
    "token_losses": exercise_token_losses,
    "pareto_front_names": lambda shown, package: [fn({"a": (1, 3.0), "b": (2, 2.0), "c": (2, 4.0), "d": (3, 2.0)})
                                            for fn in (shown, package)],
}
HELPERS = {"pool_heads"}  # shown beside a function that uses them, and exercised through it


def package_source_cells():
    for path in chapter_paths():
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code" and "package-source" in cell.metadata.get("tags", []):
                yield pytest.param(path.name, index, cell.source, id=f"{path.stem}-cell{index}")


def assert_same(shown, package, what):
    if isinstance(package, torch.Tensor):
        assert torch.equal(shown, package), what
    elif isinstance(package, (tuple, list)):
        assert len(shown) == len(package), what
        for a, b in zip(shown, package, strict=True):
            assert_same(a, b, what)
    elif isinstance(package, dict):
        assert shown.keys() == package.keys(), what
        for key in package:
            assert_same(shown[key], package[key], f"{what}[{key!r}]")
    else:
        assert shown == package, what


@pytest.mark.parametrize("chapter, index, source", list(package_source_cells()))
def test_each_listing_runs_alone_and_computes_what_the_package_computes(chapter, index, source):
    namespace = {"__name__": "__listing__"}
    exec(compile(source, f"{chapter}[{index}]", "exec"), namespace)  # a NameError here: the listing lacks an import
    for name, _ in definitions(source):
        if name in HELPERS:
            continue
        assert name in EXERCISES, f"{chapter} cell {index} shows {name}: add a way to exercise it to EXERCISES"
        shown, package = EXERCISES[name](namespace[name], package_objects()[name])
        assert_same(shown, package, f"{chapter} cell {index}: {name} as shown differs from the package's")
