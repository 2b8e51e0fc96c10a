"""The decode profile sorts XLA's thunks by what they do, from the optimized HLO: a wrong sort would put the weight
read's time under another part and misstate where a step's time goes."""

from __future__ import annotations

import gzip
import json

from playground.tools import bench_profile

# XLA writes one instruction a line, however long
# ruff: noqa: E501

HLO = """HloModule jit_call, entry_computation_layout={(f32[1,576]{1,0})->f32[1,49152]{1,0}}

%fused_computation.1 (param_0: f32[1,576], param_1: s8[576,3072]) -> f32[1,3072] {
  %param_0 = f32[1,576]{1,0} parameter(0)
  %param_1 = s8[576,3072]{1,0} parameter(1)
  %convert = f32[576,3072]{1,0} convert(%param_1)
  ROOT %dot.1 = f32[1,3072]{1,0} dot(%param_0, %convert), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_add (param_0.2: f32[1,576]) -> f32[1,576] {
  %param_0.2 = f32[1,576]{1,0} parameter(0)
  ROOT %add.1 = f32[1,576]{1,0} add(%param_0.2, %param_0.2)
}

ENTRY %main.2 (a: f32[1,576]) -> f32[1,49152] {
  %dot.7 = f32[1,49152]{1,0} dot(%a, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %dot.8 = f32[3,128,1]{2,1,0} dot(%q, %k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  %fusion.3 = f32[1,3072]{1,0} fusion(%a, %w8), kind=kOutput, calls=%fused_computation.1
  %dynamic-update-slice.4 = f32[1,3,128,64]{3,2,1,0} dynamic-update-slice(%c, %u, %i, %i, %i, %i)
  %dynamic-update-slice.5 = s32[8,5]{1,0} dynamic-update-slice(%r, %v, %i, %i), metadata={op_name="jit(call)/while/body/scatter"}
  %custom-call = (f32[1,5]{1,0}, s32[1,5]{1,0}) custom-call(%l), custom_call_target="TopK", metadata={op_name="jit(call)/while/body/top_k"}
  %add_fusion = f32[1,576]{1,0} fusion(%x), kind=kLoop, calls=%fused_add
  ROOT %while.2 = (s32[]) while(%t), condition=%c, body=%b
}
"""


def test_each_instruction_is_sorted_by_what_it_does(tmp_path):
    path = tmp_path / "module.txt"
    path.write_text(HLO)
    found = bench_profile._instructions(path)
    assert found["fusion.3"]["opcode"] == "fusion" and "convert" in found["fusion.3"]["body"]
    sorted_as = {name: bench_profile._category(found[name]) for name in found if name in {
        "dot.7", "dot.8", "fusion.3", "dynamic-update-slice.4", "dynamic-update-slice.5", "custom-call",
        "add_fusion", "while.2"}}
    assert sorted_as == {
        "dot.7": "weight matvecs",  # the head
        "fusion.3": "weight matvecs",  # int8's unpacking fused with its dot
        "dot.8": "attention over the cache",  # batched per KV head
        "dynamic-update-slice.4": "cache writes",
        "dynamic-update-slice.5": "token choice and records",  # a chunk's records, not the cache
        "custom-call": "token choice and records",
        "add_fusion": "norms, rope, activations and the rest",
        "while.2": None,  # a container: its body's thunks are timed on their own
    }


def test_the_decode_programs_thunks_and_the_decodes_span_are_read_from_the_trace(tmp_path):
    events = [{"ph": "X", "name": "dot.7", "dur": 300, "args": {"hlo_module": "jit_call", "hlo_op": "dot.7"}},
              {"ph": "X", "name": "dot.7", "dur": 200, "args": {"hlo_module": "jit_call", "hlo_op": "dot.7"}},
              {"ph": "X", "name": "dot.1", "dur": 900, "args": {"hlo_module": "jit__prefill", "hlo_op": "dot.1"}},
              {"ph": "X", "name": "$loop.py:157 _decode", "dur": 2_000_000}]
    path = tmp_path / "t.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    loaded = bench_profile._events(path)
    assert bench_profile._thunks(loaded) == {"dot.7": 500}  # the prefill's thunks are not the decode's
    assert bench_profile._span(loaded, "_decode") == 2.0
