"""The C++ classes from Python: configs, caches, steps, buckets, row
operations and the torch.ops.statickv.cache_write operator."""

import pytest
import torch

import statickv


def small_config(**fields):
    config = statickv.CacheConfig()
    config.num_layers, config.num_kv_heads, config.head_dim = 2, 2, 4
    config.max_batch, config.max_len = 3, 16
    for name, value in fields.items():
        setattr(config, name, value)
    return config


def test_prepare_and_update_return_views_of_the_same_buffers():
    cache = statickv.StaticCache(small_config())
    pointer = cache.keys(0).data_ptr()
    step = cache.prepare(torch.arange(4), 2)
    key = torch.randn(2, 2, 4, 4)
    keys, values = cache.update(0, key, key * 2, step)
    assert keys.shape == (2, 2, 16, 4) and keys.data_ptr() == pointer
    assert torch.equal(keys[:, :, :4], key) and torch.equal(values[:, :, :4], key * 2)
    assert step.mask(0).shape == (2, 1, 4, 16) and step.additive_mask(0).dtype == torch.float32
    assert cache.seq_lengths().tolist() == [4, 4, 0]


def test_quantized_storage_stages_dequantized_views_in_one_buffer():
    plain = statickv.StaticCache(small_config())
    cache = statickv.StaticCache(small_config(kv_storage=statickv.KvStorage.INT8))
    assert not cache.config.plain_storage() and cache.keys(0).dtype == torch.int8
    assert cache.memory_bytes() == statickv.estimate_memory_bytes(cache.config)
    assert cache.staging_bytes() > 0 and plain.staging_bytes() == 0
    key = torch.randn(2, 2, 4, 4)
    step = cache.prepare(torch.arange(4), 2)
    keys, _ = cache.update(0, key, key, step)
    assert keys.dtype == torch.float32
    assert torch.allclose(keys[:, :, :4], key, atol=0.02 * key.abs().max().item())
    keys1, _ = cache.update(1, key, key, step)
    assert keys1.data_ptr() == keys.data_ptr()  # one staging buffer for every layer


def test_copy_from_makes_an_independent_copy_in_the_copys_own_buffers():
    source = statickv.StaticCache(small_config())
    copy = statickv.StaticCache(small_config())
    pointer = copy.keys(0).data_ptr()
    step = source.prepare(torch.arange(3), 3)
    for layer in range(2):
        source.update(layer, torch.randn(3, 2, 3, 4), torch.randn(3, 2, 3, 4), step)
    copy.copy_from(source)
    assert copy.keys(0).data_ptr() == pointer != source.keys(0).data_ptr()
    assert torch.equal(copy.keys(1), source.keys(1))
    assert torch.equal(copy.values(0), source.values(0))
    assert copy.seq_lengths().tolist() == source.seq_lengths().tolist() == [3, 3, 3]
    source.reset()
    assert copy.seq_lengths().tolist() == [3, 3, 3] and copy.keys(0).any()
    with pytest.raises(RuntimeError, match="other: expected a cache of this cache's config"):
        copy.copy_from(statickv.StaticCache(small_config(max_len=8)))


def test_row_operations_keep_addresses_and_move_rows():
    cache = statickv.HybridCache(small_config(layer_types=statickv.all_sliding(2),
                                              sliding_window=4))
    pointers = [cache.keys(layer).data_ptr() for layer in range(2)]
    step = cache.prepare(torch.tensor([[0, 1], [0, -1], [0, 1]]), 3)
    for layer in range(2):
        cache.update(layer, torch.randn(3, 2, 2, 4), torch.randn(3, 2, 2, 4), step)
    cache.copy_row(0, 1)
    assert torch.equal(cache.keys(0)[1], cache.keys(0)[0])
    cache.reorder(torch.tensor([2, 0]))
    cache.reset_rows(torch.tensor([1]))
    assert cache.seq_lengths().tolist() == [2, 0, 2]
    assert not cache.keys(1)[1].any()
    cache.reset()
    assert [cache.keys(layer).data_ptr() for layer in range(2)] == pointers
    assert cache.capacity(0) == 4 + 4 - 1  # Note [ring capacity]


def test_shape_buckets():
    buckets = statickv.ShapeBuckets.powers_of_two(12)
    assert buckets.sizes() == [1, 2, 4, 8, 12] and buckets.round_up(5) == 8
    assert statickv.ShapeBuckets.of([32, 8, 8]).sizes() == [8, 32]
    assert statickv.ShapeBuckets.multiples_of(16, 40).sizes() == [16, 32, 40]
    with pytest.raises(RuntimeError, match=r"size: expected a value in \[1, 12\]"):
        buckets.round_up(13)


def test_c10_errors_are_python_exceptions_with_statickv_messages():
    with pytest.raises(RuntimeError, match="CacheConfig.max_len: expected > 0 but got 0"):
        statickv.StaticCache(small_config(max_len=0))
    with pytest.raises(RuntimeError, match=r"StaticCache: CacheConfig.layer_types\[0\]: "
                                           r"expected full but got sliding"):
        statickv.StaticCache(small_config(layer_types=statickv.all_sliding(2), sliding_window=4))
    cache = statickv.StaticCache(small_config())
    with pytest.raises(RuntimeError, match=r"live_batch: expected a value in \[1, max_batch=3\]"):
        cache.prepare(torch.arange(2), 4)
    with pytest.raises(RuntimeError, match=r"rows\[0\]: expected a row in \[0, max_batch=3\)"):
        cache.reset_rows(torch.tensor([5]))


def test_cache_write_op_writes_per_row_slots_in_place():
    keys, values = torch.zeros(3, 2, 9, 4), torch.zeros(3, 2, 9, 4)
    key = torch.randn(2, 2, 2, 4)
    slots = torch.tensor([[0, 1], [5, 8]])  # row 1: one real token, one to the scratch slot
    torch.ops.statickv.cache_write(keys, values, key, -key, slots)
    assert torch.equal(keys[0, :, :2], key[0]) and torch.equal(values[1, :, 5], -key[1, :, 0])
    assert torch.equal(keys[1, :, 8], key[1, :, 1]) and not keys[2].any()
    assert keys[0, :, 2:].abs().sum() == 0


def test_cache_write_op_checks_shapes_even_on_meta_tensors():
    keys = torch.empty(3, 2, 9, 4, device="meta")
    key = torch.empty(2, 2, 2, 4, device="meta")
    torch.ops.statickv.cache_write(keys, keys.clone(), key, key, torch.empty(2, 2, dtype=torch.long,
                                                                             device="meta"))
    with pytest.raises(RuntimeError, match=r"slots: expected \[q\] = \[2\] or \[b, q\]"):
        torch.ops.statickv.cache_write(keys, keys.clone(), key, key,
                                       torch.empty(3, dtype=torch.long, device="meta"))
    schema = str(torch.ops.statickv.cache_write.default._schema)
    assert "Tensor(a!) keys" in schema and "Tensor(b!) values" in schema


def test_host_offload_stages_views_and_splits_device_and_host_bytes():
    plain = statickv.HybridCache(small_config(layer_types=statickv.all_sliding(2),
                                              sliding_window=4))
    cache = statickv.HybridCache(small_config(layer_types=statickv.all_sliding(2),
                                              sliding_window=4, host_offload=True))
    assert cache.host_memory_bytes() > 0 and plain.host_memory_bytes() == 0
    assert cache.memory_bytes() == cache.device_memory_bytes() + cache.host_memory_bytes()
    assert cache.memory_bytes() == statickv.estimate_memory_bytes(cache.config)
    assert statickv.estimate_memory(cache.config) == {
        "device": cache.device_memory_bytes(), "host": cache.host_memory_bytes()}
    positions = torch.tensor([[0, 1, 2], [0, 1, -1]])
    steps = [c.prepare(positions, 2) for c in (plain, cache)]
    for layer in range(2):
        key, value = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
        want = plain.update(layer, key, value, steps[0])
        got = cache.update(layer, key, value, steps[1])
        assert got[0].data_ptr() != cache.keys(layer).data_ptr()  # a staging buffer
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert torch.equal(cache.keys(layer), plain.keys(layer))  # the host copy


def test_host_offload_with_quantized_storage_is_refused_naming_both():
    config = small_config(kv_storage=statickv.KvStorage.INT8, host_offload=True)
    with pytest.raises(RuntimeError, match="host_offload.*kv_storage=int8"):
        config.validate()
