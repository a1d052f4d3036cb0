// TypedEdgeSum, the native twin of ir/ops/sparse.py's TypedEdgeSum: every edge type's messages summed into
// the destination nodes in one node, for a bundle of graphs at once ("rows" bundling: the joined graphs as
// one disjoint union, as the Python op stacks them).
// Never touches Python, the inbox or other nodes.
#include "kernels/rows.h"

namespace amp {

namespace {

// TypedEdgeSum (sparse.TypedEdgeSum): x (N, T * H) holds each node's message under each of the T edge
// types side by side, edges (2, E) the edges as rows [src * T + type, dst]; per edge e
//     out[dst[e]] += x[src[e], type[e] * H : (type[e] + 1) * H]      (edge by edge, in edge order)
// Forward joins each x with its edges (whole state, or key + match_on), checks every complete pair as the
// Python op does, then sums all pairs of the bundle into one (sum of N, H) output in their common dtype
// (np.concatenate's promotion) and sends each pair its rows (views) with x's state. The edges are cached
// (a reference) under that state; backward adds each edge's destination gradient into its source block:
// dx[src[e], type[e] * H : ...] += g[dst[e]], again for the whole bundle in one (sum of N, T * H) buffer.
// Ports: 0 "x", 1 "edges". ints: [types].
class TypedEdgeSumKernel : public Kernel {
 public:
  explicit TypedEdgeSumKernel(const KernelSpec& spec) : joins_(spec) {
    if (spec.ints.size() != 1 || spec.ints[0] < 1) throw SpecError("a TypedEdgeSum takes [types >= 1]");
    types_ = spec.ints[0];
  }

  void forward(NodeCtx& ctx, int port, Span<const Tensor> xs, Span<const State> states, Outputs& out) override {
    pairs_.clear();
    for (size_t i = 0; i < xs.size(); ++i) {
      JoinEntry got;
      if (joins_.add(port, xs[i], states[i], 2, *ctx.layout, &got)) pairs_.push_back(Pair{got.slot[0].x, got.slot[1].x, got.slot[0].state});
    }
    if (pairs_.empty()) return;
    int64_t total = 0, width = -1;
    DType dtype = pairs_[0].x.dtype();
    for (const Pair& p : pairs_) {
      if (p.x.rank() != 2)
        throw OpError("TypedEdgeSum input 'x': expected a matrix (nodes, types * hidden), got shape " + shape_text(p.x), 0);
      if (p.edges.rank() != 2 || p.edges.dim(0) != 2)
        throw OpError("TypedEdgeSum input 'edges': expected (2, E) rows [src * types + type, dst], got shape " +
                      shape_text(p.edges), 1);
      const int64_t n = p.x.dim(0);
      index_vector("TypedEdgeSum", "edges", 1, row_of(p.edges, 0), n * types_);
      index_vector("TypedEdgeSum", "edges", 1, row_of(p.edges, 1), n);
      total += n;
    }
    for (const Pair& p : pairs_) {
      if (width >= 0 && p.x.dim(1) != width)
        throw OpError("TypedEdgeSum input 'x': the graphs of one bundle differ in width (" + std::to_string(width) +
                      " and " + std::to_string(p.x.dim(1)) + ")", 0);
      width = p.x.dim(1);
      if (p.x.dtype() != dtype) dtype = promote(dtype, p.x.dtype());
    }
    if (width % types_)
      throw OpError("TypedEdgeSum input 'x': expected a width divisible by types=" + std::to_string(types_) +
                    " (one block per edge type), got " + std::to_string(width), 0);
    const int64_t hidden = width / types_;
    const int64_t shape[2] = {total, hidden};
    Tensor y = Tensor::zeros(dtype, shape, 2);
    int64_t base = 0;
    for (const Pair& p : pairs_) {
      Tensor x = as_dtype(p.x, dtype).contiguous_copy();
      numeric_dtype(dtype, "TypedEdgeSum", [&](auto zero) {
        using T = decltype(zero);
        // x seen as (N * T, H): edge e reads block src*T + type, adds into its destination's row
        sum_edges<T>(x.data<T>(), p.edges, hidden, y.data<T>() + base * hidden, false);
      });
      const int64_t n = p.x.dim(0);
      if (ctx.train) cache_.emplace(p.state) = Cached{p.edges, n, width};
      out.push(0, y.rows(base, base + n), p.state);
      base += n;
    }
    pairs_.clear();
  }

  void backward(NodeCtx& ctx, int, Span<const Tensor> gs, Span<const State> states, Outputs& out) override {
    cached_.clear();
    int64_t total = 0, width = 0;
    DType dtype = gs[0].dtype();
    for (size_t i = 0; i < gs.size(); ++i) {
      cached_.push_back(take_entry(cache_, states[i], *ctx.layout));
      const Cached& c = cached_.back();
      const Tensor& g = gs[i];
      if (g.rank() != 2 || g.dim(0) != c.nodes || g.dim(1) * types_ != c.width)
        throw OpError("TypedEdgeSum output 'out': expected a gradient of shape (" + std::to_string(c.nodes) + ", " +
                      std::to_string(c.width / types_) + "), got " + shape_text(g));
      total += c.nodes;
      width = c.width;
      if (g.dtype() != dtype) dtype = promote(dtype, g.dtype());
    }
    for (const Cached& c : cached_)
      if (c.width != width) throw OpError("TypedEdgeSum: the graphs of one bundle differ in width");
    const int64_t shape[2] = {total, width};
    Tensor dx = Tensor::zeros(dtype, shape, 2);
    int64_t base = 0;
    for (size_t i = 0; i < gs.size(); ++i) {
      const Cached& c = cached_[i];
      Tensor g = as_dtype(gs[i], dtype).contiguous_copy();
      numeric_dtype(dtype, "TypedEdgeSum", [&](auto zero) {
        using T = decltype(zero);
        sum_edges<T>(g.data<T>(), c.edges, width / types_, dx.data<T>() + base * width, true);
      });
      out.push(0, dx.rows(base, base + c.nodes), states[i]);
      base += c.nodes;
    }
    cached_.clear();
  }

  size_t held() const override { return cache_.size() + joins_.size(); }

 private:
  struct Pair {
    Tensor x, edges;
    State state;
  };
  struct Cached {
    Tensor edges;
    int64_t nodes = 0, width = 0;
  };

  // Forward (backward false): dst_rows[dst[e]] += src_blocks[block[e]]; backward: dst_blocks[block[e]] +=
  // src_rows[dst[e]]; rows and blocks of `hidden` items, edge by edge.
  template <class T>
  static void sum_edges(const T* src, const Tensor& edges, int64_t hidden, T* dst, bool backward) {
    const int64_t n_edges = edges.dim(1), s0 = edges.stride(0), s1 = edges.stride(1);
    const int64_t* e = edges.data<int64_t>();
    for (int64_t k = 0; k < n_edges; ++k) {
      const int64_t block = e[k * s1], node = e[s0 + k * s1];
      const T* from = src + (backward ? node : block) * hidden;
      T* to = dst + (backward ? block : node) * hidden;
      for (int64_t j = 0; j < hidden; ++j) to[j] += from[j];
    }
  }

  Joins joins_;
  int64_t types_ = 1;
  StateMap<Cached> cache_;
  std::vector<Pair> pairs_;      // this call's complete pairs (kept: no allocation once warm)
  std::vector<Cached> cached_;  // this call's cache entries
};
AMP_REGISTER_KERNEL("typed_edge_sum", TypedEdgeSumKernel);

}  // namespace
}  // namespace amp
