#!/usr/bin/python3
"""Writes a small hand-designed Chakra execution trace set, independently of
pipegrid's C++ writer: the messages are built with Debian's python3-protobuf
from classes that protoc generates, at run time, from the schema
interchange/chakra_et.proto (Chakra's et_def.proto field names and numbers).

The set: GPipe over 2 stages (rank r runs stage r) with 2 micro-batches,
activations and gradients as COMM_SEND/COMM_RECV pairs matched by comm_tag,
then an all-reduce between both ranks (the tied word embeddings' gradients,
as Megatron-LM's embedding group does) in process group "0", then an
optimizer step. Attributes use the value types Chakra's feeder reads
(src/feeder/et_feeder_node.cpp): num_ops int64, tensor_size uint64,
comm_type int64, comm_size int64, comm_src/comm_dst/comm_tag int32, pg_name
string; one receive gives comm_size as uint64 instead, and every compute
node carries is_cpu_op (bool), as Chakra's PyTorch converter writes it.

Usage: tests/scripts/write_chakra_traces.py OUTPUT_PREFIX
writes OUTPUT_PREFIX.0.et, OUTPUT_PREFIX.1.et and OUTPUT_PREFIX.json.
"""

import importlib
import json
import os
import subprocess
import sys
import tempfile

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = os.path.join(SOURCE_DIR, "interchange", "chakra_et.proto")

ACTIVATION_BYTES = 4 * 1024 * 1024
EMBEDDING_GRADIENT_BYTES = 64 * 1024 * 1024


def load_schema():
    """The protoc-generated module of SCHEMA (generated in a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="chakra-schema-") as folder:
        subprocess.run(
            ["protoc", "--proto_path", os.path.dirname(SCHEMA), "--python_out", folder, SCHEMA],
            check=True,
        )
        sys.path.insert(0, folder)
        module = importlib.import_module("chakra_et_pb2")
        sys.path.remove(folder)
        return module


def varint(value):
    """Protobuf's base-128 varint of a non-negative integer."""
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def length_delimited(message):
    body = message.SerializeToString()
    return varint(len(body)) + body


class Rank:
    """One rank's nodes, numbered from 0 in the order they are added."""

    def __init__(self, et, rank):
        self.et = et
        self.rank = rank
        self.nodes = []

    def node(self, name, node_type, ctrl=(), data=()):
        node = self.et.Node(id=len(self.nodes), name=name, type=node_type)
        node.ctrl_deps.extend(ctrl)
        node.data_deps.extend(data)
        self.nodes.append(node)
        return node

    def attr(self, node, name, **value):
        node.attr.append(self.et.AttributeProto(name=name, **value))

    def compute(self, name, micros, ops, output_bytes, ctrl=(), data=()):
        node = self.node(name, self.et.COMP_NODE, ctrl, data)
        node.duration_micros = micros
        self.attr(node, "num_ops", int64_val=ops)
        self.attr(node, "tensor_size", uint64_val=output_bytes)
        self.attr(node, "is_cpu_op", bool_val=False)
        return node.id

    def send(self, name, peer, tag, size, ctrl=(), data=()):
        node = self.node(name, self.et.COMM_SEND_NODE, ctrl, data)
        self.attr(node, "comm_src", int32_val=self.rank)
        self.attr(node, "comm_dst", int32_val=peer)
        self.attr(node, "comm_tag", int32_val=tag)
        self.attr(node, "comm_size", int64_val=size)
        return node.id

    def recv(self, name, peer, tag, size, ctrl=(), data=(), size_unsigned=False):
        node = self.node(name, self.et.COMM_RECV_NODE, ctrl, data)
        self.attr(node, "comm_src", int32_val=peer)
        self.attr(node, "comm_dst", int32_val=self.rank)
        self.attr(node, "comm_tag", int32_val=tag)
        if size_unsigned:
            self.attr(node, "comm_size", uint64_val=size)
        else:
            self.attr(node, "comm_size", int64_val=size)
        return node.id

    def all_reduce(self, name, group, size, ctrl=(), data=()):
        node = self.node(name, self.et.COMM_COLL_NODE, ctrl, data)
        self.attr(node, "comm_type", int64_val=self.et.ALL_REDUCE)
        self.attr(node, "comm_size", int64_val=size)
        self.attr(node, "pg_name", string_val=group)
        return node.id

    def file_bytes(self):
        metadata = self.et.GlobalMetadata(version="1.0.0")
        metadata.attr.append(self.et.AttributeProto(name="schema", string_val="pipegrid-test-gpipe"))
        return length_delimited(metadata) + b"".join(length_delimited(n) for n in self.nodes)


def gpipe(et):
    """Tags: 0, 1 the activations of micro-batches 0, 1; 2, 3 their gradients."""
    first, last = Rank(et, 0), Rank(et, 1)

    f0 = first.compute("stage0.forward.mb0", 1500, 3_000_000_000, ACTIVATION_BYTES)
    first.send("stage0.send_activation.mb0", 1, 0, ACTIVATION_BYTES, data=[f0])
    f1 = first.compute("stage0.forward.mb1", 1500, 3_000_000_000, ACTIVATION_BYTES, ctrl=[f0])
    first.send("stage0.send_activation.mb1", 1, 1, ACTIVATION_BYTES, data=[f1])
    g0 = first.recv("stage0.recv_gradient.mb0", 1, 2, ACTIVATION_BYTES, ctrl=[f1])
    b0 = first.compute("stage0.backward.mb0", 3000, 6_000_000_000, ACTIVATION_BYTES, ctrl=[f1], data=[g0])
    g1 = first.recv("stage0.recv_gradient.mb1", 1, 3, ACTIVATION_BYTES, ctrl=[f1], size_unsigned=True)
    b1 = first.compute("stage0.backward.mb1", 3000, 6_000_000_000, ACTIVATION_BYTES, ctrl=[b0], data=[g1])
    r0 = first.all_reduce("stage0.allreduce.embedding_grads", "0", EMBEDDING_GRADIENT_BYTES, data=[b1])
    first.compute("stage0.optimizer_step", 250, 100_000_000, 0, data=[r0])

    a0 = last.recv("stage1.recv_activation.mb0", 0, 0, ACTIVATION_BYTES)
    f0 = last.compute("stage1.forward.mb0", 1750, 3_500_000_000, ACTIVATION_BYTES, data=[a0])
    a1 = last.recv("stage1.recv_activation.mb1", 0, 1, ACTIVATION_BYTES)
    f1 = last.compute("stage1.forward.mb1", 1750, 3_500_000_000, ACTIVATION_BYTES, ctrl=[f0], data=[a1])
    b0 = last.compute("stage1.backward.mb0", 3500, 7_000_000_000, ACTIVATION_BYTES, ctrl=[f1], data=[f0])
    last.send("stage1.send_gradient.mb0", 0, 2, ACTIVATION_BYTES, data=[b0])
    b1 = last.compute("stage1.backward.mb1", 3500, 7_000_000_000, ACTIVATION_BYTES, ctrl=[b0], data=[f1])
    last.send("stage1.send_gradient.mb1", 0, 3, ACTIVATION_BYTES, data=[b1])
    r1 = last.all_reduce("stage1.allreduce.embedding_grads", "0", EMBEDDING_GRADIENT_BYTES, data=[b1])
    last.compute("stage1.optimizer_step", 250, 100_000_000, 0, data=[r1])
    return [first, last], {"0": [0, 1]}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: write_chakra_traces.py OUTPUT_PREFIX")
    prefix = sys.argv[1]
    ranks, groups = gpipe(load_schema())
    for rank in ranks:
        with open(f"{prefix}.{rank.rank}.et", "wb") as out:
            out.write(rank.file_bytes())
    with open(f"{prefix}.json", "w") as out:
        json.dump(groups, out, indent=2)
        out.write("\n")


if __name__ == "__main__":
    main()
