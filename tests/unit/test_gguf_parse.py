"""Contracts of the hooks into gguf that a GGUF conversion uses (playground/models/gguf_parse.py): transformers'
GGUF loading still builds gguf's reader and name table when it runs, and one of each serves the whole file.
When gguf or transformers changes one, the failure names the hook."""

from __future__ import annotations

import pytest
import transformers

from playground.models import gguf_parse
from tests.helpers import tiny_llama

READER = f"gguf.{gguf_parse.GGUF_READER}"
NAME_MAP = f"gguf.{gguf_parse.GGUF_NAME_MAP}"


def broke(hook: str, what: str) -> str:
    return f"transformers {transformers.__version__}: {hook} {what}; update playground/models/gguf_parse.py"


class _ReaderProbe(Exception):
    """Raised by the stand-in reader once transformers asks it for the file's fields."""


def test_gguf_loading_builds_its_reader_from_gguf_when_it_runs_so_one_parse_serves_every_load(monkeypatch):
    import gguf
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    built: list[str] = []

    class Reader:
        def __init__(self, path, mode="r"):
            built.append(str(path))

        @property
        def fields(self):
            raise _ReaderProbe

    monkeypatch.setattr(gguf, gguf_parse.GGUF_READER, Reader)
    with gguf_parse.one_gguf_parse():
        for _ in range(3):  # the config, the weights and the tokenizer's config each load the file
            try:
                load_gguf_checkpoint("model.gguf", return_tensors=False)
            except _ReaderProbe:
                continue
            except Exception as exc:  # the real reader, bound elsewhere, found no such file
                pytest.fail(broke(READER, f"is no longer what GGUF loading reads with ({exc!r})"))
            pytest.fail(broke(READER, "is no longer what GGUF loading reads the file with"))
    assert built == ["model.gguf"], broke(READER, f"was built {len(built)} times for one file")
    assert getattr(gguf, gguf_parse.GGUF_READER) is Reader  # put back after the block


def test_a_gguf_reader_in_the_block_parses_over_a_plain_array_and_reads_the_same_values(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "model.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_uint32("test.count", 7)
    writer.add_token_list(["a", "bb", "ccc"])
    writer.add_tensor("weight", np.arange(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    plain = gguf.GGUFReader(path)
    with gguf_parse.one_gguf_parse():
        reader = gguf.GGUFReader(path)
        assert gguf.GGUFReader(path) is reader
    assert type(reader.data) is np.ndarray, broke(READER, "no longer keeps its map in `data`")
    assert isinstance(plain.data, np.memmap)  # outside the block: gguf's own reader
    assert reader.fields["test.count"].contents() == plain.fields["test.count"].contents() == 7
    assert reader.fields["tokenizer.ggml.tokens"].contents() == ["a", "bb", "ccc"]
    assert reader.tensors[0].data.tolist() == plain.tensors[0].data.tolist() == list(range(8))


def test_gguf_weight_naming_builds_gguf_name_tables_when_it_runs_so_one_table_serves_every_module(monkeypatch):
    import gguf
    from transformers.modeling_gguf_pytorch_utils import TensorProcessor, get_gguf_hf_weights_map

    original = getattr(gguf, gguf_parse.GGUF_NAME_MAP)
    built: list[tuple] = []

    def name_map(arch, n_blocks):
        built.append((arch, n_blocks))
        return original(arch, n_blocks)

    monkeypatch.setattr(gguf, gguf_parse.GGUF_NAME_MAP, name_map)
    model = tiny_llama()
    get_gguf_hf_weights_map(model, TensorProcessor())
    per_module = len(built)
    assert per_module > 1, broke(NAME_MAP, "is no longer what GGUF loading names weights with")
    built.clear()
    with gguf_parse.one_gguf_parse():
        names = get_gguf_hf_weights_map(model, TensorProcessor())
    assert len(built) == 1, broke(NAME_MAP, f"was built {len(built)} times for one model")
    assert names["blk.0.attn_q.weight"] == "model.layers.0.self_attn.q_proj.weight"
    assert getattr(gguf, gguf_parse.GGUF_NAME_MAP) is name_map  # put back after the block
