"""count_traffic (experiments/traffic.py, chapter 14): the bytes each operation reads and writes, views moving
nothing, expanded and repeated tensors counted once."""
import torch

from attention_book.experiments.operator_traffic import Traffic, count_traffic, tensor_bytes


def test_tensor_bytes_counts_the_distinct_numbers_a_tensor_addresses():
    x = torch.zeros(10, 6)
    assert tensor_bytes(x) == 240
    assert tensor_bytes(x[:, :4]) == 160  # a slice of every row: its own part of the rows
    assert tensor_bytes(x[0].expand(5, 6)) == 24  # stride 0: the same row five times
    assert tensor_bytes(x.t()) == 240 and tensor_bytes(torch.zeros(3, 0)) == 0
    assert tensor_bytes(torch.zeros(4, dtype=torch.float16)) == 8


def test_views_move_nothing_and_a_product_reads_its_inputs_and_writes_its_output():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert count_traffic(lambda: a.t().view(2, 8, 8)[:, :2].expand(3, 2, 2, 8)).total == 0
    traffic = count_traffic(lambda: a @ b)
    assert (traffic.read, traffic.written) == ((8 * 16 + 16 * 4) * 4, 8 * 4 * 4)
    assert traffic.total == traffic.read + traffic.written


def test_a_tensor_passed_twice_to_one_operation_is_read_once_and_each_operation_counts():
    x = torch.randn(64, 32)
    assert count_traffic(lambda: x * x).read == 64 * 32 * 4
    traffic = count_traffic(lambda: (x * 2) * 3)  # two operations: the product in between is written, then read
    assert (traffic.read, traffic.written) == (2 * 64 * 32 * 4, 2 * 64 * 32 * 4)
    name, (read, written, calls) = next(iter(traffic.by_op.items()))
    assert name == "mul" and calls == 2 and (read, written) == (traffic.read, traffic.written)


def test_writing_into_a_tensor_counts_it_as_written():
    buffer, row = torch.zeros(100, 8), torch.ones(8)

    def append():
        buffer[3] = row  # a view of row 3, then copy_ into it

    traffic = count_traffic(append)
    assert (traffic.read, traffic.written) == (8 * 4, 8 * 4) and "copy_" in traffic.by_op


def test_traffic_is_a_dispatch_mode_that_adds_up_across_calls():
    x = torch.randn(10)
    with torch.no_grad(), Traffic() as traffic:
        x + 1
        x + 1
    assert traffic.by_op["add"] == (80, 80, 2)
