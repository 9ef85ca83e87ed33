"""A real pretrained encoder (all-MiniLM-L6-v2, chapter 5) built from the book's attention layer.

Needs the package's optional extra ``real`` (``pip install "attention-book[real]"``): ``loader`` reads a model folder
(config.json, model.safetensors, tokenizer.json), ``encoder`` is the BERT-style encoder, and ``reference`` runs
Hugging Face's ``BertModel`` on the same files, the implementation the encoder is checked against.
"""
