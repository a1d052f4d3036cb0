// See blas.h. The function pointers are set once (under the GIL, before any worker starts) and only
// read afterwards, so workers call them without a lock; OpenBLAS itself is safe to call from several
// threads at once.
#include "blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace amp {

namespace {

enum { kRowMajor = 101, kColMajor = 102, kNoTrans = 111, kTrans = 112, kUpper = 121 };

// cblas signatures with the integer type as a parameter: ILP64 builds (suffix 64_) take int64 sizes.
template <class I, class T>
using Gemm = void (*)(int, int, int, I, I, I, T, const T*, I, const T*, I, T, T*, I);
template <class I, class T>
using Gemv = void (*)(int, int, I, I, T, const T*, I, const T*, I, T, T*, I);
template <class I, class T>
using Dot = T (*)(I, const T*, I, const T*, I);
template <class I, class T>
using Syrk = void (*)(int, int, int, I, I, T, const T*, I, T, T*, I);

struct Library {
  bool loaded = false;
  bool ilp64 = false;
  void* gemm[2] = {nullptr, nullptr};  // [float32, float64]
  void* gemv[2] = {nullptr, nullptr};
  void* dot[2] = {nullptr, nullptr};
  void* syrk[2] = {nullptr, nullptr};
  std::string status = "no BLAS loaded: products use the plain loop";
} lib;

template <class T>
constexpr int slot() { return sizeof(T) == 8 ? 1 : 0; }

// numpy's is_blasable2d, with strides in items: the second axis contiguous, the first a row stride at
// least as long as a row.
bool blasable(int64_t s1, int64_t s2, int64_t d1, int64_t d2) { return s2 == 1 && s1 >= d2 && s1 > 0; }

// numpy's matmul_inner_noblas: each output a zero, plus the products in order. An outer product (n == 1, a
// weight's gradient from one row) is the common case here: its sum is the one term added to a zero (so a
// product of -0.0 gives +0.0, as numpy's does), written as a loop the compiler vectorizes when rows are
// contiguous.
template <class T>
void noblas(const T* a, int64_t as_m, int64_t as_n, const T* b, int64_t bs_n, int64_t bs_p, T* o, int64_t os_m,
            int64_t os_p, int64_t m, int64_t n, int64_t p) {
  if (n == 1) {
    for (int64_t i = 0; i < m; ++i) {
      const T ai = a[i * as_m];
      T* oi = o + i * os_m;
      if (bs_p == 1 && os_p == 1)
        for (int64_t j = 0; j < p; ++j) oi[j] = T(0) + ai * b[j];
      else
        for (int64_t j = 0; j < p; ++j) oi[j * os_p] = T(0) + ai * b[j * bs_p];
    }
    return;
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < p; ++j) {
      T sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += a[i * as_m + k * as_n] * b[k * bs_n + j * bs_p];
      o[i * os_m + j * os_p] = sum;
    }
}

template <class I, class T>
T call_dot(int64_t n, const T* a, int64_t sa, const T* b, int64_t sb) {
  if (sa > 0 && sb > 0) {
    double sum = 0.0;  // numpy's TYPE_dot sums the BLAS dot into a double
    sum += reinterpret_cast<Dot<I, T>>(lib.dot[slot<T>()])(static_cast<I>(n), a, static_cast<I>(sa), b,
                                                          static_cast<I>(sb));
    return static_cast<T>(sum);
  }
  double sum = 0.0;
  for (int64_t k = 0; k < n; ++k) sum += static_cast<double>(a[k * sa]) * static_cast<double>(b[k * sb]);
  return static_cast<T>(sum);
}

// numpy's no-BLAS TYPE_dot of a contiguous array with itself: summed in a double, rounded to T.
template <class T>
T call_plain_dot(int64_t n, const T* a) {
  double sum = 0.0;
  for (int64_t k = 0; k < n; ++k) sum += static_cast<double>(a[k]) * static_cast<double>(a[k]);
  return static_cast<T>(sum);
}

// numpy's TYPE_gemv: y = A x for A (m, n) in either layout.
template <class I, class T>
void call_gemv(const T* a, int64_t as_m, int64_t as_n, const T* x, int64_t xs, T* y, int64_t ys, int64_t m, int64_t n) {
  int order;
  int64_t lda;
  if (blasable(as_m, as_n, m, n)) {
    order = kColMajor;
    lda = as_m;
  } else {
    order = kRowMajor;
    lda = as_n;
  }
  reinterpret_cast<Gemv<I, T>>(lib.gemv[slot<T>()])(order, kTrans, static_cast<I>(n), static_cast<I>(m), T(1), a,
                                                    static_cast<I>(lda), x, static_cast<I>(xs), T(0), y,
                                                    static_cast<I>(ys));
}

// numpy's TYPE_matmul_matrixmatrix (inputs already blasable in one layout or the other).
template <class I, class T>
void call_gemm(const T* a, int64_t as_m, int64_t as_n, const T* b, int64_t bs_n, int64_t bs_p, T* o, int64_t os_m,
               int64_t m, int64_t n, int64_t p) {
  int trans1, trans2;
  int64_t lda, ldb;
  if (blasable(as_m, as_n, m, n)) {
    trans1 = kNoTrans;
    lda = as_m;
  } else {
    trans1 = kTrans;
    lda = as_n;
  }
  if (blasable(bs_n, bs_p, n, p)) {
    trans2 = kNoTrans;
    ldb = bs_n;
  } else {
    trans2 = kTrans;
    ldb = bs_p;
  }
  const int64_t ldc = os_m;
  if (a == b && m == p && as_m == bs_p && as_n == bs_n && trans1 != trans2) {
    // a @ a.T (or a.T @ a) of one buffer: numpy uses syrk and mirrors the upper triangle
    reinterpret_cast<Syrk<I, T>>(lib.syrk[slot<T>()])(kRowMajor, kUpper, trans1, static_cast<I>(p), static_cast<I>(n),
                                                      T(1), a, static_cast<I>(trans1 == kNoTrans ? lda : ldb), T(0), o,
                                                      static_cast<I>(ldc));
    for (int64_t i = 0; i < p; ++i)
      for (int64_t j = i + 1; j < p; ++j) o[j * ldc + i] = o[i * ldc + j];
    return;
  }
  reinterpret_cast<Gemm<I, T>>(lib.gemm[slot<T>()])(kRowMajor, trans1, trans2, static_cast<I>(m), static_cast<I>(p),
                                                    static_cast<I>(n), T(1), a, static_cast<I>(lda), b,
                                                    static_cast<I>(ldb), T(0), o, static_cast<I>(ldc));
}

// Copy a (d1, d2) matrix into a tight buffer, transposed in memory when its first axis has the smaller
// stride (numpy's TYPE_matrix_copy with the layout numpy picks for its temporary).
template <class T>
void tight_copy(const T* src, int64_t s1, int64_t s2, int64_t d1, int64_t d2, std::vector<T>& buf, int64_t* t1,
                int64_t* t2) {
  bool transpose = std::llabs(s1) < std::llabs(s2);
  *t1 = transpose ? 1 : d2;
  *t2 = transpose ? d1 : 1;
  buf.resize(static_cast<size_t>(d1 * d2));
  for (int64_t i = 0; i < d1; ++i)
    for (int64_t j = 0; j < d2; ++j) buf[i * *t1 + j * *t2] = src[i * s1 + j * s2];
}

template <class I, class T>
void dispatch(const Tensor& A, const Tensor& B, Tensor& O) {
  const int64_t m = A.dim(0), n = A.dim(1), p = B.dim(1);
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  T* o = O.data<T>();
  int64_t as_m = A.stride(0), as_n = A.stride(1), bs_n = B.stride(0), bs_p = B.stride(1);
  const int64_t os_m = O.stride(0), os_p = O.stride(1);
  if (!lib.loaded || m == 0 || n == 0 || p == 0) {
    noblas<T>(a, as_m, as_n, b, bs_n, bs_p, o, os_m, os_p, m, n, p);
    return;
  }
  const bool special = m == 1 || n == 1 || p == 1;
  const bool a_ok = blasable(as_m, as_n, m, n) || blasable(as_n, as_m, n, m);
  const bool b_ok = blasable(bs_n, bs_p, n, p) || blasable(bs_p, bs_n, p, n);
  if (special) {
    if (m == 1 && p == 1) {
      o[0] = call_dot<I, T>(n, a, as_n, b, bs_n);
    } else if (n == 1 && (p == 1 || m == 1)) {
      noblas<T>(a, as_m, as_n, b, bs_n, bs_p, o, os_m, os_p, m, n, p);
    } else if (m == 1 && b_ok && blasable(as_n, 1, n, 1)) {
      call_gemv<I, T>(b, bs_p, bs_n, a, as_n, o, os_p, p, n);  // vector @ matrix: B^T a
    } else if (p == 1 && a_ok && blasable(bs_n, 1, n, 1)) {
      call_gemv<I, T>(a, as_m, as_n, b, bs_n, o, os_m, m, n);
    } else {
      noblas<T>(a, as_m, as_n, b, bs_n, bs_p, o, os_m, os_p, m, n, p);
    }
    return;
  }
  std::vector<T> abuf, bbuf;
  if (!a_ok) {
    tight_copy<T>(a, as_m, as_n, m, n, abuf, &as_m, &as_n);
    a = abuf.data();
  }
  if (!b_ok) {
    tight_copy<T>(b, bs_n, bs_p, n, p, bbuf, &bs_n, &bs_p);
    b = bbuf.data();
  }
  call_gemm<I, T>(a, as_m, as_n, b, bs_n, bs_p, o, os_m, m, n, p);  // O is contiguous (m, p): no transposed output
}

}  // namespace

std::string blas_load(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!handle) return "numpy's BLAS library " + path + " is not loaded in this process";
  // (prefix, suffix, ilp64): numpy's wheels ship scipy-openblas with prefixed ILP64 symbols
  const struct {
    const char* prefix;
    const char* suffix;
    bool ilp64;
  } styles[] = {{"scipy_", "64_", true}, {"", "64_", true}, {"scipy_", "", false}, {"", "", false}};
  for (const auto& style : styles) {
    auto sym = [&](const char* name) {
      return dlsym(handle, (std::string(style.prefix) + name + style.suffix).c_str());
    };
    void* g[2] = {sym("cblas_sgemm"), sym("cblas_dgemm")};
    void* v[2] = {sym("cblas_sgemv"), sym("cblas_dgemv")};
    void* d[2] = {sym("cblas_sdot"), sym("cblas_ddot")};
    void* s[2] = {sym("cblas_ssyrk"), sym("cblas_dsyrk")};
    if (g[0] && g[1] && v[0] && v[1] && d[0] && d[1] && s[0] && s[1]) {
      for (int i = 0; i < 2; ++i) {
        lib.gemm[i] = g[i];
        lib.gemv[i] = v[i];
        lib.dot[i] = d[i];
        lib.syrk[i] = s[i];
      }
      lib.ilp64 = style.ilp64;
      lib.loaded = true;
      lib.status = std::string(style.prefix) + "cblas_dgemm" + style.suffix + " in " + path +
                   (style.ilp64 ? " (ILP64)" : " (LP64)");
      dlclose(handle);  // drops only the reference RTLD_NOLOAD added: numpy keeps the library loaded
      return "";
    }
  }
  dlclose(handle);
  return "no cblas symbols (cblas_dgemm, scipy_cblas_dgemm64_, ...) in " + path;
}

std::string blas_status() { return lib.status; }
bool blas_loaded() { return lib.loaded; }
void blas_unload() { lib = Library(); }

void matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dtype() == DType::f64) {
    if (lib.ilp64) dispatch<int64_t, double>(a, b, out);
    else dispatch<int, double>(a, b, out);
  } else {
    if (lib.ilp64) dispatch<int64_t, float>(a, b, out);
    else dispatch<int, float>(a, b, out);
  }
}

double vdot_self(const Tensor& a) {
  const int64_t n = a.size();
  if (a.dtype() == DType::f64) {
    if (!lib.loaded) return call_plain_dot<double>(n, a.data<double>());
    return lib.ilp64 ? call_dot<int64_t, double>(n, a.data<double>(), 1, a.data<double>(), 1)
                     : call_dot<int, double>(n, a.data<double>(), 1, a.data<double>(), 1);
  }
  if (!lib.loaded) return call_plain_dot<float>(n, a.data<float>());
  return lib.ilp64 ? call_dot<int64_t, float>(n, a.data<float>(), 1, a.data<float>(), 1)
                   : call_dot<int, float>(n, a.data<float>(), 1, a.data<float>(), 1);
}

Tensor transposed(const Tensor& t) {
  int64_t shape[2] = {t.dim(1), t.dim(0)};
  int64_t strides[2] = {t.stride(1), t.stride(0)};
  Storage* st = t.storage();
  if (st) st->refs.fetch_add(1, std::memory_order_relaxed);
  return Tensor::view_of(st, t.raw(), t.dtype(), shape, strides, 2);
}

}  // namespace amp
