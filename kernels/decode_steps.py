"""The per-tile building blocks of the split-KV decode kernels (kernels/decode.py's stage 1 and
kernels/decode_flat.py's flattened persistent stage 1): page-table gathers, fp8 (e4m3) widening to
fp16, and the online-softmax step over one block of keys in float32 (base-2 exponentials).

Every function here is a `triton.jit` device function; the numerics (roundings, the fp8 widening,
the query scaling for fp8 caches) are described in kernels/decode.py's module docstring. Two
kernels that fold the same tiles through these functions in the same order compute the same bits.
"""

from __future__ import annotations

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def kv_offsets(page_indices_ptr, page_base, tok, valid, kv_head_off, offs_d, stride_kv_page,
                stride_kv_tok, PAGE_SIZE: tl.constexpr):
    """Element offsets [BLOCK_N, HEAD_DIM] of tokens `tok` of one KV head in the page pool."""
    page = tl.load(page_indices_ptr + page_base + tok // PAGE_SIZE, mask=valid, other=0)
    # int64: page * stride reaches past 2^31 for large caches.
    row = page.to(tl.int64) * stride_kv_page + (tok % PAGE_SIZE) * stride_kv_tok
    return row[:, None] + kv_head_off + offs_d[None, :]


@triton.jit
def page_ids(page_indices_ptr, page_base, tok, kv_hi, PAGE_SIZE: tl.constexpr):
    """The page id holding each token position `tok` of a request (0 at and past kv_hi)."""
    return tl.load(page_indices_ptr + page_base + tok // PAGE_SIZE, mask=tok < kv_hi, other=0)


@triton.jit
def prefetch_page_ids_l2(page_indices_ptr, page_base, kv_lo, kv_hi, PAGE_SIZE: tl.constexpr):
    """Prefetch into L2 the page ids of token positions [kv_lo, kv_hi) of one request (kv_hi >
    kv_lo): one `prefetch.global.L2` per 128-byte line (32 ids), 64 lines per step, nothing
    waited on. Why: the loop loads each block's ids one block ahead, and that load, issued behind
    num_stages - 1 K/V tiles of the same program, stalls the next step when it misses L2 (the
    H200 profiles of fp8 head_dim 256 at pages 2-16: docs/KERNEL_NOTES.md). GPU only (inline
    PTX); the interpreter's caller skips it."""
    first = page_base + kv_lo // PAGE_SIZE
    last = page_base + (kv_hi - 1) // PAGE_SIZE  # inclusive
    offs = tl.arange(0, 64) * 32
    for p0 in range(first, last + 32, 64 * 32):
        # Stepping by 32 ids from `first` touches every line of [first, last]; the clamp to
        # `last` covers its line when it is past the last step.
        idx = tl.minimum(p0 + offs, last)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
            "=r,l,r", [page_indices_ptr + idx, (p0 + offs < last + 32).to(tl.int32)],
            dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def token_rows(page, tok, stride_kv_page, stride_kv_tok, PAGE_SIZE: tl.constexpr):
    """Element offset (int64) of each token's row in the page pool: page id x page stride plus
    slot x token stride (int64: page x stride passes 2^31 for large caches)."""
    return page.to(tl.int64) * stride_kv_page + (tok % PAGE_SIZE) * stride_kv_tok


@triton.jit
def query_rows_to_f16(q):
    """(q16, q_inv): bf16 query rows [R, D] taken to fp16 exactly, each row scaled by the power of
    two that puts its largest magnitude in [2^14, 2^15) (every element within 2^31 of it then fits
    fp16's range and precision), and the float32 inverse scale per row [R] that the caller folds
    into its float32 score scale. An all-zero row gets scale 2^126 (its q16 stays 0)."""
    qf = q.to(tl.float32)
    amax_exp = (tl.max(tl.abs(qf), 1).to(tl.int32, bitcast=True) >> 23) & 0xFF
    mul_exp = tl.minimum(tl.maximum(268 - amax_exp, 1), 253)  # biased, 2^(14 - E)
    q_mul = (mul_exp << 23).to(tl.float32, bitcast=True)
    q_inv = ((254 - mul_exp) << 23).to(tl.float32, bitcast=True)
    return (qf * q_mul[:, None]).to(tl.float16), q_inv


@triton.jit
def e4m3x4_to_f16(x, ASM: tl.constexpr):
    """Four fp16 tensors (bytes 0..3 of each int32 of `x`, little endian: elements 4j..4j+3)
    with the exact fp16 values of the e4m3 codes. ASM: one `mov.b32 {lo, hi}` and two
    `cvt.rn.f16x2.e4m3x2` per int32 (sm_89+); otherwise (the interpreter, which cannot run
    inline asm) the same values through a byte extract and Triton's e4m3 -> fp16 cast."""
    if ASM:
        b0, b1, b2, b3 = tl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; .reg .b32 r0, r1;\n"
            "mov.b32 {lo, hi}, $4;\n"
            "cvt.rn.f16x2.e4m3x2 r0, lo;\n"
            "cvt.rn.f16x2.e4m3x2 r1, hi;\n"
            "mov.b32 {$0, $1}, r0;\n"
            "mov.b32 {$2, $3}, r1; }",
            "=h,=h,=h,=h,r", [x],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=1)
    else:
        b0 = e4m3_byte_to_f16(x & 0xFF)
        b1 = e4m3_byte_to_f16((x >> 8) & 0xFF)
        b2 = e4m3_byte_to_f16((x >> 16) & 0xFF)
        b3 = e4m3_byte_to_f16((x >> 24) & 0xFF)
    return b0, b1, b2, b3


@triton.jit
def e4m3_byte_to_f16(code):
    """fp16 value of e4m3 codes (int32 0..255). The interpreter's e4m3 cast widens the NaN codes
    (0x7F, 0xFF) to 480 (its exponent shift has no NaN case); the hardware conversion and torch
    give NaN, so they are set here."""
    f = code.to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(tl.float16)
    return tl.where((code & 0x7F) == 0x7F, float("nan"), f).to(tl.float16)


@triton.jit
def load_e4m3_as_f16(ptr, row, valid, kv_head_off, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                      ASM: tl.constexpr):
    """The [BLOCK_N, HEAD_DIM] fp16 tile of e4m3 elements at `ptr + row[:, None] + kv_head_off +
    d`, loaded as HEAD_DIM / 4 int32 per token (16-byte vector loads) and widened where it was
    loaded. The join/reshape that rebuilds the tile stops Triton from propagating a dot-operand
    layout back to the load (which, for the P.V product of 8-bit V, is one byte-wide shared-memory
    load per element on sm_90): the widening runs in the load's layout and the fp16 tile reaches
    the mma through the 16-bit path. Masked tokens read 0 (+0.0 in e4m3). Element order: byte k
    of int32 j is element 4j + k; the joins put (j, k // 2, k % 2) on the last three axes."""
    ptr32 = ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    # row + kv_head_off is a multiple of HEAD_DIM >= 64 elements (the page and token strides of
    # a contiguous pool are multiples of num_kv_heads x HEAD_DIM), so every token's first word
    # is 16-byte aligned (prepare_decode checks the pool's own 4-byte alignment; torch
    # allocations are 16-byte aligned, which Triton's pointer specialisation sees).
    base = tl.multiple_of((row + kv_head_off) // 4, 4)
    offs_j = tl.arange(0, HEAD_DIM // 4)
    x = tl.load(ptr32 + base[:, None] + offs_j[None, :], mask=valid[:, None], other=0)
    b0, b1, b2, b3 = e4m3x4_to_f16(x, ASM)
    tile = tl.join(tl.join(b0, b2), tl.join(b1, b3))  # [BLOCK_N, HEAD_DIM // 4, k // 2, k % 2]
    return tl.reshape(tile, (BLOCK_N, HEAD_DIM))


@triton.jit
def e4m3_pairs_to_f16(x, ASM: tl.constexpr):
    """Two fp16 tensors of `x`'s shape from int16 `x` holding two e4m3 codes each (little endian:
    the low byte is the element at the even head_dim index 2j, the high byte the odd one, 2j+1):
    (even, odd), the exact fp16 values. ASM: per two int16 (pack=2, which in the P.V product's
    operand layout are the same column of two consecutive tokens) one `prmt` gathers the two low
    bytes and the two high bytes, and two `cvt.rn.f16x2.e4m3x2` widen them: 1.5 instructions per
    two elements, no byte-wide shared-memory load; otherwise (the interpreter) a byte extract and
    Triton's e4m3 -> fp16 cast, the same values."""
    if ASM:
        even, odd = tl.inline_asm_elementwise(
            "{ .reg .b32 t; .reg .b16 lo, hi;\n"
            "prmt.b32 t, $2, 0, 0x3120;\n"
            "mov.b32 {lo, hi}, t;\n"
            "cvt.rn.f16x2.e4m3x2 $0, lo;\n"
            "cvt.rn.f16x2.e4m3x2 $1, hi; }",
            "=r,=r,r", [x], dtype=(tl.float16, tl.float16), is_pure=True, pack=2)
    else:
        code = x.to(tl.int32) & 0xFFFF
        even = e4m3_byte_to_f16(code & 0xFF)
        odd = e4m3_byte_to_f16(code >> 8)
    return even, odd


@triton.jit
def load_e4m3_pairs(ptr, row, valid, kv_head_off, HEAD_DIM: tl.constexpr):
    """The [BLOCK_N, HEAD_DIM / 2] int16 tile of e4m3 element pairs (2j, 2j + 1) at `ptr + row[:,
    None] + kv_head_off + d`. Read as 16-bit elements, the tile reaches the P.V product's operand
    layout through the 16-bit path (ldmatrix.trans from shared memory) instead of one byte-wide
    shared load per element; e4m3_pairs_to_f16 then splits each pair in registers. Masked tokens
    read 0 (+0.0 in e4m3)."""
    ptr16 = ptr.to(tl.pointer_type(tl.int16), bitcast=True)
    # row + kv_head_off is a multiple of HEAD_DIM >= 64 elements (see load_e4m3_as_f16), so each
    # token's first pair is 16-byte aligned.
    base = tl.multiple_of((row + kv_head_off) // 2, 8)
    offs_j = tl.arange(0, HEAD_DIM // 2)
    return tl.load(ptr16 + base[:, None] + offs_j[None, :], mask=valid[:, None], other=0)


@triton.jit
def online_softmax_step_pairs(q, k, v_pairs, valid, m_i, l_i, acc_even, acc_odd,
                               qk_scale_log2, ASM: tl.constexpr):
    """`online_softmax_step` for e4m3 V read as element pairs (fp8 caches, fp16 products):
    the P.V product runs as two products over the even and the odd head_dim columns, into
    acc_even and acc_odd [G_PAD, HEAD_DIM / 2] float32 (interleaved once per task). The same
    roundings as the plain step: K and V widened exactly, P rounded to fp16."""
    k = k.to(tl.float16)
    s = tl.dot(q, tl.trans(k)) * qk_scale_log2
    s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p_in = p.to(tl.float16)
    v_even, v_odd = e4m3_pairs_to_f16(v_pairs, ASM)
    acc_even = acc_even * alpha[:, None] + tl.dot(p_in, v_even)
    acc_odd = acc_odd * alpha[:, None] + tl.dot(p_in, v_odd)
    return m_new, l_i, acc_even, acc_odd


@triton.jit
def online_softmax_step(q, k, v, valid, m_i, l_i, acc, qk_scale_log2,
                         DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
                         P_DTYPE: tl.constexpr):
    """Fold one block of keys/values into the running max, sum and output (base-2 domain).

    qk_scale_log2: a float32 scalar, or [G_PAD, 1] (fp8 caches with bf16 queries: the score
    scale times each row's power-of-two query multiplier's inverse)."""
    # fp8 pages widen here to q's type, fp16 on the fp8 path (exact, one cvt.rn.f16x2.e4m3x2 per
    # two elements on sm_90); 16-bit pages are already of that type.
    k = k.to(q.dtype)
    v = v.to(q.dtype)
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale_log2
    s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p_in = p.to(P_DTYPE)  # the rounding a bf16/fp16 matrix product sees
    if UPCAST_DOT:
        p_in = p_in.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p_in, v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def online_softmax_step_split(q3, k, v, valid, m_i, l_i, acc, qk_scale_log2,
                               DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
                               P_DTYPE: tl.constexpr):
    """`online_softmax_step` for a step cut into WARP_SPLIT token slices, each with its own
    running max / sum / output (batched [W, ...] products: Triton puts the warps on the batch
    axis, so no slice waits on another's reduction within a step).

    q3 [W, G_PAD, D]; k, v [W, NW, D]; valid [W, NW]; m_i, l_i [W, G_PAD]; acc [W, G_PAD, D].
    qk_scale_log2: a float32 scalar or [1, G_PAD, 1]. A slice with no valid key yet keeps
    m = -inf: the exponentials then subtract 0 instead (alpha = p = 0, no NaN)."""
    k = k.to(q3.dtype)
    v = v.to(q3.dtype)
    s = tl.dot(q3, tl.permute(k, (0, 2, 1)), input_precision=DOT_PRECISION) * qk_scale_log2
    s = tl.where(valid[:, None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 2))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, :, None])
    l_i = l_i * alpha + tl.sum(p, 2)
    p_in = p.to(P_DTYPE)
    if UPCAST_DOT:
        p_in = p_in.to(tl.float32)
    acc = acc * alpha[:, :, None] + tl.dot(p_in, v, input_precision=DOT_PRECISION)
    return m_new, l_i, acc
