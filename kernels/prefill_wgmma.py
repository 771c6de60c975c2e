"""A Hopper prefill tile written in Gluon: paged causal attention for the hybrid kernel's prefill
tasks, with the tensor-core products issued asynchronously (1.10-1.13x the Triton tile on chunks
of 1.5K+ tokens on an H100, 128 keys per step; docs/PERFORMANCE.md, nineteenth session).

Why it exists (docs/KERNEL_NOTES.md, "The prefill tile in Gluon"): Triton 3.6 waits for every
warpgroup product right after issuing it unless the product only feeds its own accumulator, so
in kernels/hybrid.py's `_prefill_task` the softmax never overlaps a product (405-414 TFLOP/s
against FlashInfer's 555-580 on the same pages). Gluon, Triton's lower-level dialect, exposes
`warpgroup_mma(is_async=True)` and `warpgroup_mma_wait(num_outstanding)`, which give the
schedule FA3 uses within one warpgroup:

    S_j = Q K_j^T          (async)
    O  += P_{j-1} V_{j-1}  (async, issued right behind it)
    wait until only O's product is in flight; softmax of S_j -> P_j   (overlaps the P.V product)
    wait for O; rescale O by the new row maxima

K/V tiles are gathered page by page with `cp.async` into a ring of STAGES shared-memory buffers
(no TMA: a tile spans several pages), page ids read one block ahead of their copy.

What ptxas makes of it (local sm_90 SASS, Triton 3.6): the row maxima and exponentials of block
j are scheduled after the wait for P_{j-1} V_{j-1}, next to block j + STAGES - 1's copies, so the
softmax overlaps the copies' issue rather than the product. A version that issued the copies
right after the two products (the softmax then stayed between the waits) measured 4-5% slower
(docs/PERFORMANCE.md, nineteenth session, call 5), so this schedule stays.

Same task list (kernels/hybrid.py FIELDS), same numerics as `_prefill_task` (base-2 online
softmax in float32, P rounded to the query type before its product, key <= pos causal mask on
the diagonal and ragged steps only), so it is checked against the same float64 reference. It
runs only where Gluon's Hopper ops exist (sm_90, 16-bit pages, head_dim 64 or 128, 64- or
128-row tiles; kernels/hybrid.py `prefill_wgmma_ok`), and hybrid_config chooses it at head_dim 128
with 128-row tiles; everything else, the Triton interpreter included, keeps `_prefill_task`.

A persistent mode (`PERSISTENT`) runs the colocated schedule's prefill grid and tail the way
kernels/hybrid.py's MODE_DYNAMIC does (a shared task counter, the ordered launch's roles, the
last program resetting the counters); `HybridConfig.colocated_wgmma` turns it on. It is
correct on an H100 but was no faster than the Triton grid there (docs/PERFORMANCE.md,
twentieth session), so hybrid_config leaves it off.
"""

from __future__ import annotations

from kvtune.kernels import triton_mode  # noqa: F401 - must run before triton is imported

try:  # Gluon ships with Triton >= 3.5; the Hopper ops need its NVIDIA backend.
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    # The cp.async copy into shared memory: `async_load` since Triton 3.7 (this checkout's
    # tests), `async_copy_global_to_shared` in 3.5-3.6 (the GPU machine's); same arguments.
    async_copy = getattr(cp, "async_load", None) or cp.async_copy_global_to_shared
    # The CTA-wide barrier: `barrier` since Triton 3.7, `thread_barrier` before.
    cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
    HAS_GLUON = True
except (ImportError, AttributeError):  # pragma: no cover - a Triton without these Gluon ops
    HAS_GLUON = False

BLOCK_MS = (64, 128)  # query rows (tokens x G) per tile: one or two warpgroups of 64 rows
HEAD_DIMS = (64, 128)


def num_warps_for(block_m: int) -> int:
    """Warps of a tile of block_m rows: one warp per 16 rows (a warpgroup per 64)."""
    return block_m // 16


if HAS_GLUON:

    @gluon.jit
    def _issue_tile(k_ptr, v_ptr, k_buf, v_buf, page, n0, kv_hi, kv_head_off, stride_kv_page,
                    stride_kv_tok, offs_n, offs_d, PAGE_SIZE: gl.constexpr):
        """Start the cp.async copies of the K and V rows of keys n0 .. n0 + BLOCK_N - 1 (page ids
        `page`, already loaded) into one ring buffer and commit them as one group. Keys at or past
        kv_hi are not read; their rows are zero-filled."""
        key = n0 + offs_n
        valid = key < kv_hi
        row = page.to(gl.int64) * stride_kv_page + (key % PAGE_SIZE) * stride_kv_tok + kv_head_off
        offs = gl.expand_dims(row, 1) + gl.expand_dims(offs_d, 0)
        mask = gl.expand_dims(valid, 1)
        async_copy(k_buf, k_ptr + offs, mask=mask)
        async_copy(v_buf, v_ptr + offs, mask=mask)
        cp.commit_group()

    @gluon.jit
    def _page_ids(page_indices_ptr, page_base, n0, kv_hi, offs_n, PAGE_SIZE: gl.constexpr):
        """The page id of each key n0 + offs_n (0 at and past kv_hi)."""
        key = n0 + offs_n
        return gl.load(page_indices_ptr + page_base + key // PAGE_SIZE, mask=key < kv_hi, other=0)

    @gluon.jit
    def _softmax_step(s, m_i, l_i, n0, full_hi, kv_hi, pos, offs_ns, qk_scale_log2):
        """Fold a block of raw scores s [BLOCK_M, BLOCK_N] (float32, before the scale) into the
        running max m_i and sum l_i (base 2, scaled domain). Returns (p, alpha, m_new, l_new).
        Blocks at or past full_hi carry the causal / ragged mask (key <= pos, key < kv_hi)."""
        s = s * qk_scale_log2
        if n0 >= full_hi:
            key = n0 + offs_ns
            seen = (gl.expand_dims(key, 0) <= gl.expand_dims(pos, 1)) \
                & gl.expand_dims(key < kv_hi, 0)
            s = gl.where(seen, s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        # A row that has seen no key yet keeps m = -inf; shift by 0 there to avoid inf - inf.
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.exp2(m_i - m_safe)
        p = gl.exp2(s - gl.expand_dims(m_safe, 1))
        l_new = l_i * alpha + gl.sum(p, 1)
        return p, alpha, m_new, l_new

    @gluon.jit
    def _attend_task(
        task, q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
        page_indices_ptr, qk_scale_log2, v_scale, stride_q_t, stride_q_h, stride_o_t, stride_o_h,
        stride_kv_page, stride_kv_tok, q_smem, k_smem, v_smem,
        NUM_QO_HEADS: gl.constexpr, G: gl.constexpr, HEAD_DIM: gl.constexpr,
        PAGE_SIZE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
        STAGES: gl.constexpr, NUM_WARPS: gl.constexpr,
    ):
        """One prefill task (kind 1; `task` points at its 9 int32 fields): BLOCK_M query rows
        (tokens x G heads of one KV head) against the task's keys kv_lo .. kv_hi - 1, written
        like kernels/hybrid.py's `_store_rows` (normalised into out, or partial rows and base-2
        lses for the merge). q_smem, k_smem and v_smem are the program's buffers; every copy
        into them has landed and every product reading them has finished when this returns."""
        dtype: gl.constexpr = q_ptr.dtype.element_ty
        # Layouts. Loads: 16 bytes per thread along head_dim. Products: m64nNk16 warpgroup MMAs
        # with the warps stacked along the rows (each warpgroup owns 64 rows).
        TPW_D: gl.constexpr = HEAD_DIM // 8
        ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NUM_WARPS, 1], [1, 0])
        s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                      instr_shape=[16, BLOCK_N, 16])
        o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                      instr_shape=[16, HEAD_DIM, 16])
        p_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_l, k_width=2)

        # kernels/hybrid.py's task layout, 9 int32 (FIELDS): kind, req, q_row0, n_tok, pos0,
        # kv_lo, kv_hi, part_row, head.
        req = gl.load(task + 1)
        q_row0 = gl.load(task + 2)
        n_tok = gl.load(task + 3)
        pos0 = gl.load(task + 4)
        kv_lo = gl.load(task + 5)
        kv_hi = gl.load(task + 6)
        part_row = gl.load(task + 7)
        head = gl.load(task + 8)
        page_base = gl.load(page_indptr_ptr + req)
        kv_head_off = head * HEAD_DIM

        # Query rows into shared memory (the A operand of S = Q K^T).
        rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ld))
        offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
        tok = rows // G
        q_offs = (q_row0 + tok).to(gl.int64) * stride_q_t + (head * G + rows % G) * stride_q_h
        q = gl.load(q_ptr + gl.expand_dims(q_offs, 1) + gl.expand_dims(offs_d, 0),
                    mask=gl.expand_dims(tok < n_tok, 1), other=0.0)
        q_smem.store(q)
        fence_async_shared()

        offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ld))
        offs_ns = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_l))
        pos = pos0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_l)) // G
        # Keys kv_lo .. full_hi - 1 are seen by every row: those blocks need no mask.
        full_hi = kv_lo + gl.maximum(gl.minimum(kv_hi, pos0 + 1) - kv_lo, 0) // BLOCK_N * BLOCK_N
        n_blocks = gl.cdiv(kv_hi - kv_lo, BLOCK_N)

        # Prologue: blocks 0 .. STAGES - 1 in flight (empty groups past the last block), and
        # the page ids of block STAGES loaded.
        for i in gl.static_range(STAGES):
            page = _page_ids(page_indices_ptr, page_base, kv_lo + i * BLOCK_N, kv_hi, offs_n,
                             PAGE_SIZE)
            _issue_tile(k_ptr, v_ptr, k_smem.index(i), v_smem.index(i), page,
                        kv_lo + i * BLOCK_N, kv_hi, kv_head_off, stride_kv_page, stride_kv_tok,
                        offs_n, offs_d, PAGE_SIZE)
        page_next = _page_ids(page_indices_ptr, page_base, kv_lo + STAGES * BLOCK_N, kv_hi,
                              offs_n, PAGE_SIZE)

        # Block 0: S_0 and its softmax.
        cp.wait_group(STAGES - 1)
        cta_barrier()
        s0 = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_l)
        s_tok = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s0, use_acc=False,
                              is_async=True)
        s = warpgroup_mma_wait(0, deps=(s_tok,))
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, s_l))
        l_i = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(1, s_l))
        p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, kv_lo, full_hi, kv_hi, pos, offs_ns,
                                           qk_scale_log2)
        acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_l)
        for j in range(1, n_blocks):
            stage = j % STAGES
            prev = (j - 1) % STAGES
            # Block j's copies landed (every thread's: hence the barrier). Committed so far:
            # STAGES + j - 1 groups, block j the (j + 1)-th.
            cp.wait_group(STAGES - 2)
            cta_barrier()
            s_tok = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), s0, use_acc=False,
                                  is_async=True)
            p_op = gl.convert_layout(p.to(dtype), p_l)
            o_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
            # S_j done (products finish in issue order); P_{j-1} V_{j-1} may still run.
            s = warpgroup_mma_wait(1, deps=(s_tok,))
            p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, kv_lo + j * BLOCK_N, full_hi, kv_hi,
                                               pos, offs_ns, qk_scale_log2)
            acc = warpgroup_mma_wait(0, deps=(o_tok,))
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_l)), 1)
            # Every warpgroup is done with block j - 1's buffers: refill them with block
            # j + STAGES - 1 (an empty group past the last block keeps the wait counts right).
            cta_barrier()
            n_fill = kv_lo + (j + STAGES - 1) * BLOCK_N
            _issue_tile(k_ptr, v_ptr, k_smem.index(prev), v_smem.index(prev), page_next, n_fill,
                        kv_hi, kv_head_off, stride_kv_page, stride_kv_tok, offs_n, offs_d,
                        PAGE_SIZE)
            page_next = _page_ids(page_indices_ptr, page_base, n_fill + BLOCK_N, kv_hi, offs_n,
                                  PAGE_SIZE)
        last = (n_blocks - 1) % STAGES
        p_op = gl.convert_layout(p.to(dtype), p_l)
        o_tok = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(o_tok,))
        cp.wait_group(0)  # the empty groups past the last block

        # Out: normalised rows, or partial rows and their base-2 lses.
        l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_l))
        m_o = gl.convert_layout(m_i, gl.SliceLayout(1, o_l))
        has = l_o > 0
        o = acc / gl.expand_dims(gl.where(has, l_o, 1.0), 1) * v_scale
        rows_o = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_l))
        d_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_l))
        tok_o = rows_o // G
        qo_head = head * G + rows_o % G
        ok = gl.expand_dims(tok_o < n_tok, 1)
        if part_row < 0:
            o_offs = (q_row0 + tok_o).to(gl.int64) * stride_o_t + qo_head * stride_o_h
            gl.store(out_ptr + gl.expand_dims(o_offs, 1) + gl.expand_dims(d_o, 0),
                     o.to(out_ptr.dtype.element_ty), mask=ok)
        else:
            prow = (part_row + tok_o).to(gl.int64) * NUM_QO_HEADS + qo_head
            gl.store(part_o_ptr + gl.expand_dims(prow * HEAD_DIM, 1) + gl.expand_dims(d_o, 0), o,
                     mask=ok)
            lse = gl.where(has, m_o + gl.log2(gl.where(has, l_o, 1.0)), float("-inf"))
            gl.store(part_lse_ptr + prow, lse, mask=tok_o < n_tok)

    @gluon.jit
    def _launch_dependents():
        """Programmatic dependent launch: the next launch on the stream may start once every
        program of this one has executed this (PTX `griddepcontrol.launch_dependents`)."""
        gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // dummy $0", "=r", [],
                                  dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit(do_not_specialize=["num_tasks", "dynamic_programs"])
    def prefill_wgmma_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr,
        page_indices_ptr, tasks_ptr, counter_ptr, num_tasks, dynamic_programs, qk_scale_log2,
        v_scale, stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_kv_page, stride_kv_tok,
        NUM_QO_HEADS: gl.constexpr, G: gl.constexpr, HEAD_DIM: gl.constexpr,
        PAGE_SIZE: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
        STAGES: gl.constexpr, num_warps: gl.constexpr, PERSISTENT: gl.constexpr = False,
        NUM_SMS: gl.constexpr = 1, CTR_PAD: gl.constexpr = 1, GDC_TRIGGER: gl.constexpr = False,
        ORDERED_ROLE: gl.constexpr = 0,
    ):
        """Prefill tasks (kernels/hybrid.py FIELDS, kind 1) of tasks_ptr [num_tasks, 9].

        PERSISTENT False: program p runs task p (a grid of num_tasks programs).
        PERSISTENT True: kernels/hybrid.py's MODE_DYNAMIC with its counters (int32 [NUM_SMS + 4]:
        per-SM tickets, the task counter at NUM_SMS, programs out at NUM_SMS + 2, tail programs
        out at NUM_SMS + 3): each program takes the next task from the counter until none is
        left, so a persistent grid of one program per SM holds part of every SM (the co-located
        schedule). ORDERED_ROLE as `_hybrid_kernel`'s: 0, the last of dynamic_programs programs
        (over every launch sharing the counter) resets it; 1, the persistent grid of an ordered
        chain counts out; 2, the chain's tail leaves once dynamic_programs have counted out and
        its last program resets. GDC_TRIGGER: let the next launch start once this one's
        programs are resident (HybridConfig.ordered_launch)."""
        gl.static_assert(STAGES >= 2, "STAGES: at least 2 K/V buffers")
        if GDC_TRIGGER:
            _launch_dependents()
        dtype: gl.constexpr = q_ptr.dtype.element_ty
        q_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], dtype)
        kv_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], dtype)
        q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_sl)
        k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_sl)
        v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], kv_sl)
        if PERSISTENT:
            t = gl.atomic_add(counter_ptr + NUM_SMS, 1)
            while t < num_tasks:
                _attend_task(tasks_ptr + t.to(gl.int64) * 9, q_ptr, k_ptr, v_ptr, out_ptr,
                             part_o_ptr, part_lse_ptr, page_indptr_ptr, page_indices_ptr,
                             qk_scale_log2, v_scale, stride_q_t, stride_q_h, stride_o_t,
                             stride_o_h, stride_kv_page, stride_kv_tok, q_smem, k_smem, v_smem,
                             NUM_QO_HEADS, G, HEAD_DIM, PAGE_SIZE, BLOCK_M, BLOCK_N, STAGES,
                             num_warps)
                # Every warp is past the task's last reads of Q, K and V before the next task
                # writes them, and past its stores before the count-out below.
                cta_barrier()
                t = gl.atomic_add(counter_ptr + NUM_SMS, 1)
            ctr_l: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
            offs = gl.arange(0, CTR_PAD, layout=ctr_l)
            if ORDERED_ROLE == 0:
                done = gl.atomic_add(counter_ptr + NUM_SMS + 2, 1)
                if done == dynamic_programs - 1:
                    gl.store(counter_ptr + offs, gl.zeros([CTR_PAD], gl.int32, ctr_l),
                             mask=offs < NUM_SMS + 4)
            elif ORDERED_ROLE == 1:
                gl.atomic_add(counter_ptr + NUM_SMS + 2, 1)
            else:
                out_count = gl.atomic_add(counter_ptr + NUM_SMS + 2, 0)
                while out_count < dynamic_programs:
                    out_count = gl.atomic_add(counter_ptr + NUM_SMS + 2, 0)
                left = gl.atomic_add(counter_ptr + NUM_SMS + 3, 1)
                if left == gl.num_programs(0) - 1:
                    gl.store(counter_ptr + offs, gl.zeros([CTR_PAD], gl.int32, ctr_l),
                             mask=offs < NUM_SMS + 4)
        else:
            _attend_task(tasks_ptr + gl.program_id(0).to(gl.int64) * 9, q_ptr, k_ptr, v_ptr,
                         out_ptr, part_o_ptr, part_lse_ptr, page_indptr_ptr, page_indices_ptr,
                         qk_scale_log2, v_scale, stride_q_t, stride_q_h, stride_o_t, stride_o_h,
                         stride_kv_page, stride_kv_tok, q_smem, k_smem, v_smem, NUM_QO_HEADS, G,
                         HEAD_DIM, PAGE_SIZE, BLOCK_M, BLOCK_N, STAGES, num_warps)
