"""Paged KV cache: the K and V pages of a decode batch and the page table that finds them.

Layout (FlashInfer's "NHD" paged layout): `k_pages` and `v_pages` are
`[num_pages, page_size, num_kv_heads, head_dim]`. The page table is CSR, the same form FlashInfer
takes: request b owns pages `page_indices[page_indptr[b] : page_indptr[b + 1]]`, in token order,
and its last page holds `last_page_lens[b]` valid tokens. CSR rather than a padded
`[B, max_pages]` table because one 1M-token request in a batch of 4096 would make the padded
table 4096 x 1M entries.

With `shuffle_pages` the pages of the pool are handed out in a random order, so a kernel that
assumed a request's pages were adjacent in memory would read the wrong tokens; every request
with two or more pages is guaranteed non-contiguous.

FP8 caches (shape.kv_dtype "fp8_e4m3") hold e4m3 pages (torch.float8_e4m3fn) and one float
scale per tensor, `k_scale` and `v_scale`, as vLLM and FlashInfer store them: the value of an
element is `float(page element) * scale`. `request_kv` returns those dequantised values, which is
what the reference computes on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from kvtune.kernels.plan import AttentionShape, as_kv_lens

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SUPPORTED_TORCH_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
KV_TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn}
FP8_E4M3_MAX = 448.0  # largest finite torch.float8_e4m3fn value


def resolve_dtype(dtype, shape: AttentionShape) -> torch.dtype:
    """The torch dtype of a cache: `dtype` (torch dtype, "bf16", "fp16", "fp32") or shape.dtype."""
    if dtype is None:
        return TORCH_DTYPES[shape.dtype]
    if isinstance(dtype, str):
        if dtype not in TORCH_DTYPES:
            raise ValueError(f"dtype: {dtype!r} not allowed; allowed: {', '.join(TORCH_DTYPES)}")
        return TORCH_DTYPES[dtype]
    if dtype not in SUPPORTED_TORCH_DTYPES:
        raise ValueError(
            f"dtype: {dtype} not allowed; allowed: torch.bfloat16, torch.float16, torch.float32"
        )
    return dtype


@dataclass(frozen=True, eq=False)
class PagedKVCache:
    """One batch's paged K/V cache (see the module docstring for the layout).

    kv_lens: [B] int64 tokens per request (host copy). kv_lens_dev: the same, int32, on `device`.
    page_indptr: [B + 1] int32 on `device`. page_indices: [total pages] int32 on `device`.
    query_dtype: the torch dtype of the queries and output that go with this cache; for a 16-bit
        or float32 cache it is the pages' own dtype (None means that).
    k_scale, v_scale: per-tensor dequantisation scales of fp8 pages (finite, > 0); exactly 1.0
        for any other cache.
    """

    shape: AttentionShape
    kv_lens: np.ndarray
    k_pages: torch.Tensor
    v_pages: torch.Tensor
    page_indptr: torch.Tensor
    page_indices: torch.Tensor
    kv_lens_dev: torch.Tensor
    seed: int
    query_dtype: torch.dtype | None = None
    k_scale: float = 1.0
    v_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.k_pages.dtype != self.v_pages.dtype:
            raise ValueError(f"v_pages: dtype {self.v_pages.dtype} != k_pages' {self.k_pages.dtype}")
        fp8 = self.k_pages.dtype == torch.float8_e4m3fn
        if not fp8 and self.k_pages.dtype not in SUPPORTED_TORCH_DTYPES:
            raise ValueError(f"k_pages: dtype {self.k_pages.dtype} not allowed; allowed: bfloat16, "
                             "float16, float32, float8_e4m3fn")
        if self.query_dtype is None:
            if fp8:
                raise ValueError("query_dtype: an fp8 cache needs the query dtype (bf16, fp16, fp32)")
            object.__setattr__(self, "query_dtype", self.k_pages.dtype)
        if self.query_dtype not in SUPPORTED_TORCH_DTYPES:
            raise ValueError(f"query_dtype: {self.query_dtype} not allowed (fp8 queries are not "
                             "supported); allowed: torch.bfloat16, torch.float16, torch.float32")
        if not fp8 and self.query_dtype != self.k_pages.dtype:
            raise ValueError(f"query_dtype: {self.query_dtype} != page dtype {self.k_pages.dtype}; "
                             "allowed: the same type, or any with fp8 pages")
        for name in ("k_scale", "v_scale"):
            value = getattr(self, name)
            check_scale(name, value)
            if not fp8 and value != 1.0:
                raise ValueError(f"{name}: {value} for a {self.k_pages.dtype} cache; allowed: 1.0 "
                                 "(scales belong to fp8 caches)")
            object.__setattr__(self, name, float(value))

    @classmethod
    def from_lengths(
        cls,
        kv_lens,
        shape: AttentionShape,
        *,
        device="cpu",
        dtype=None,
        seed: int = 0,
        shuffle_pages: bool = True,
        k_scale: float | None = None,
        v_scale: float | None = None,
    ) -> PagedKVCache:
        """A cache for requests of `kv_lens` tokens (1..1,048,576 each), filled with N(0, 1) values.

        device: torch device for the pages and tables. dtype: torch.bfloat16, torch.float16 or
        torch.float32 (or "bf16"/"fp16"/"fp32"); None takes shape.dtype. seed: seeds a
        torch.Generator on `device`, so the same seed gives the same cache on the same kind of
        device (CPU and CUDA generators draw different streams). The unused tail slots of each
        last page are filled too; `fill_unused_slots` overwrites them (tests use NaN there).

        With shape.kv_dtype "fp8_e4m3" the pages are e4m3 and `dtype` is the query dtype. The
        N(0, 1) values are drawn in float32 and stored as round(x / scale) in e4m3 with one
        scale per tensor: by default amax(x) / 448 (the largest value lands on e4m3's largest),
        or the given k_scale / v_scale (finite, > 0; values beyond 448 x scale saturate).
        k_scale / v_scale are refused for a 16-bit cache.
        """
        kv_lens = as_kv_lens(kv_lens)
        torch_dtype = resolve_dtype(dtype, shape)
        fp8 = shape.kv_is_fp8
        for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
            if value is not None:
                if not fp8:
                    raise ValueError(f"{name}: given for a {shape.kv_dtype} cache; allowed: only "
                                     "with kv_dtype fp8_e4m3")
                check_scale(name, value)
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise ValueError(f"seed: {seed!r} is not an integer")  # noqa: TRY004 - project rule
        ps = shape.page_size
        pages_per_request = -(-kv_lens // ps)
        num_pages = int(pages_per_request.sum())
        if num_pages >= 2**31:
            raise ValueError(f"kv_lens: {num_pages} pages exceed the int32 page table (< 2^31)")
        device = torch.device(device)
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seed))
        page_shape = (num_pages, ps, shape.num_kv_heads, shape.head_dim)
        draw_dtype = torch.float32 if fp8 else torch_dtype
        k_pages = torch.randn(page_shape, generator=gen, device=device, dtype=draw_dtype)
        v_pages = torch.randn(page_shape, generator=gen, device=device, dtype=draw_dtype)
        scales = {}
        if fp8:
            k_pages, scales["k_scale"] = quantize_e4m3(k_pages, k_scale)
            v_pages, scales["v_scale"] = quantize_e4m3(v_pages, v_scale)

        indptr = np.zeros(kv_lens.shape[0] + 1, dtype=np.int64)
        np.cumsum(pages_per_request, out=indptr[1:])
        if shuffle_pages:
            # numpy's generator on the host: the table is small and must not depend on the device.
            perm = np.random.default_rng(int(seed)).permutation(num_pages).astype(np.int64)
            indices = _break_contiguous_runs(perm, indptr)
        else:
            indices = np.arange(num_pages, dtype=np.int64)
        return cls(
            shape=shape,
            kv_lens=kv_lens,
            k_pages=k_pages,
            v_pages=v_pages,
            page_indptr=torch.from_numpy(indptr.astype(np.int32)).to(device),
            page_indices=torch.from_numpy(indices.astype(np.int32)).to(device),
            kv_lens_dev=torch.from_numpy(kv_lens.astype(np.int32)).to(device),
            seed=int(seed),
            query_dtype=torch_dtype,
            **scales,
        )

    @property
    def batch_size(self) -> int:
        return int(self.kv_lens.shape[0])

    @property
    def page_size(self) -> int:
        return self.shape.page_size

    @property
    def num_pages(self) -> int:
        return int(self.k_pages.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        """The query/output dtype this cache goes with (the pages' dtype unless they are fp8)."""
        return self.query_dtype

    @property
    def kv_dtype(self) -> torch.dtype:
        """The pages' own dtype (torch.float8_e4m3fn for an fp8 cache)."""
        return self.k_pages.dtype

    @property
    def is_fp8(self) -> bool:
        return self.k_pages.dtype == torch.float8_e4m3fn

    @property
    def device(self) -> torch.device:
        return self.k_pages.device

    @property
    def last_page_lens(self) -> np.ndarray:
        """[B] valid tokens in each request's last page, 1..page_size (FlashInfer last_page_len)."""
        return (self.kv_lens - 1) % self.page_size + 1

    @property
    def nbytes(self) -> int:
        """Bytes held by the K and V pages (including unused tail slots)."""
        return 2 * self.k_pages.numel() * self.k_pages.element_size()

    def request_pages(self, b: int) -> torch.Tensor:
        """Page ids of request `b`, in token order (int64, on the cache's device)."""
        self._check_request(b)
        lo, hi = self.page_indptr[b].item(), self.page_indptr[b + 1].item()
        return self.page_indices[lo:hi].long()

    def request_kv(self, b: int, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(k, v) of request `b`, each `[kv_len, num_kv_heads, head_dim]` (a gathered copy).

        An fp8 cache returns the dequantised values, page element x scale, in `dtype` (default
        float32; float64 is exact). Other caches return the pages' values, converted to `dtype`
        when one is given.
        """
        pages = self.request_pages(b)
        n = int(self.kv_lens[b])
        h, d = self.shape.num_kv_heads, self.shape.head_dim
        k = self.k_pages.index_select(0, pages).reshape(-1, h, d)[:n]
        v = self.v_pages.index_select(0, pages).reshape(-1, h, d)[:n]
        if self.is_fp8:
            out = torch.float32 if dtype is None else dtype
            return k.to(out) * self.k_scale, v.to(out) * self.v_scale
        if dtype is not None:
            k, v = k.to(dtype), v.to(dtype)
        return k, v

    def subset(self, requests) -> PagedKVCache:
        """The cache of `requests` (batch indices, in the order given, each 0..B-1) as a batch of
        its own: new page tables on the device, the same K/V pages and scales (nothing copied).
        Request i of the result is request requests[i] of this one."""
        req = np.asarray(requests, dtype=np.int64).reshape(-1)
        if req.size == 0:
            raise ValueError("requests: empty; allowed: 1..B batch indices")
        if req.min() < 0 or req.max() >= self.batch_size:
            raise ValueError(f"requests: index out of range; allowed: 0..{self.batch_size - 1}")
        indptr = self.page_indptr.cpu().numpy().astype(np.int64)
        counts = indptr[req + 1] - indptr[req]
        sub_indptr = np.concatenate(([0], np.cumsum(counts)))
        take = np.concatenate([np.arange(indptr[r], indptr[r + 1]) for r in req])
        device = self.device
        kv = self.kv_lens[req]
        return PagedKVCache(
            shape=self.shape, kv_lens=kv, k_pages=self.k_pages, v_pages=self.v_pages,
            page_indptr=torch.from_numpy(sub_indptr.astype(np.int32)).to(device),
            page_indices=self.page_indices[torch.from_numpy(take).to(device)],
            kv_lens_dev=torch.from_numpy(kv.astype(np.int32)).to(device), seed=self.seed,
            query_dtype=self.query_dtype, k_scale=self.k_scale, v_scale=self.v_scale)

    def fill_unused_slots(self, value: float) -> None:
        """Write `value` into every slot past a request's kv_len in its last page (in place).

        NaN there makes a kernel that reads past kv_len produce NaN instead of a small error.
        """
        ps = self.page_size
        last = self.last_page_lens
        indptr = self.page_indptr.cpu().numpy()
        indices = self.page_indices.cpu().numpy()
        for b in np.flatnonzero(last < ps):
            page = int(indices[indptr[b + 1] - 1])
            self.k_pages[page, int(last[b]):] = value
            self.v_pages[page, int(last[b]):] = value

    def _check_request(self, b: int) -> None:
        if not 0 <= b < self.batch_size:
            raise ValueError(f"request: {b} out of range; allowed: 0..{self.batch_size - 1}")


def check_scale(name: str, value) -> None:
    """ValueError naming `name` unless value is a finite float > 0 (an fp8 dequantisation scale)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: {value!r} is not a number; allowed: a finite float > 0")
    if not math.isfinite(float(value)) or not float(value) > 0:
        raise ValueError(f"{name}: {value} not allowed; allowed: a finite float > 0")


def quantize_e4m3(x: torch.Tensor, scale: float | None = None) -> tuple[torch.Tensor, float]:
    """(e4m3 tensor, scale) with x ~ e4m3 x scale: per-tensor scale amax(|x|) / 448 unless given.

    Values beyond 448 x scale saturate to +-448 (torch's cast would give NaN for them).
    """
    if scale is None:
        amax = float(x.abs().max()) if x.numel() else 0.0
        scale = amax / FP8_E4M3_MAX if amax > 0 else 1.0
    check_scale("scale", scale)
    q = (x.float() / scale).clamp_(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    return q.to(torch.float8_e4m3fn), float(scale)


def make_queries(batch_size: int, shape: AttentionShape, *, device="cpu", dtype=None,
                 seed: int = 0) -> torch.Tensor:
    """Decode-step queries `[batch_size, num_qo_heads, head_dim]` drawn N(0, 1) from `seed`.

    Drawn from a generator seeded with `seed + 1` so that a cache and its queries built from the
    same batch seed are not the same numbers.
    """
    if not 1 <= batch_size:
        raise ValueError(f"batch_size: {batch_size} out of range; allowed: >= 1")
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed) + 1)
    return torch.randn((batch_size, shape.num_qo_heads, shape.head_dim), generator=gen,
                       device=device, dtype=resolve_dtype(dtype, shape))


def _break_contiguous_runs(perm: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Reverse the pages of any request whose shuffled pages still came out ascending-adjacent.

    A random permutation leaves a two-page request contiguous with probability about 1/num_pages;
    reversing such a request makes it non-contiguous without touching any other request.
    """
    out = perm.copy()
    counts = np.diff(indptr)
    if out.shape[0] < 2:
        return out
    step_is_one = np.diff(out) == 1
    # For request b with n >= 2 pages: all of its n-1 internal steps equal 1?
    internal = np.concatenate(([0], np.cumsum(step_is_one)))
    lo, hi = indptr[:-1], indptr[1:]
    multi = counts >= 2
    ones = internal[np.maximum(hi - 1, lo)] - internal[lo]
    for b in np.flatnonzero(multi & (ones == counts - 1)):
        out[lo[b]:hi[b]] = out[lo[b]:hi[b]][::-1]
    return out


__all__ = ["FP8_E4M3_MAX", "KV_TORCH_DTYPES", "TORCH_DTYPES", "PagedKVCache", "check_scale",
           "make_queries", "quantize_e4m3", "resolve_dtype"]
