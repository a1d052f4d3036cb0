// See trace.h.
#include "trace.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace amp {

namespace {
size_t width(char code) {
  switch (code) {
    case 'b': return 1;
    case 'i': return 4;
    default: return 8;
  }
}
}  // namespace

#ifdef __SANITIZE_ADDRESS__
// Under AddressSanitizer each column comes from the heap instead, whose redzones catch a write past a column
// (in one mapping it would land in the next column unseen).
constexpr bool kOwnMapping = false;
#else
constexpr bool kOwnMapping = true;
#endif

// One anonymous mapping holds every column, each starting on a 64-byte line; the pages are the system's
// zeros until written, so a fresh chunk costs what it touches.
Chunk::Chunk(const std::vector<Column>& columns, int64_t capacity, int64_t first) : capacity_(capacity), first_(first) {
  std::vector<size_t> sizes;
  for (const Column& c : columns) sizes.push_back((static_cast<size_t>(capacity) * width(c.code) + 63) / 64 * 64);
  data_.reserve(sizes.size());  // so that once memory is taken only a failed take throws (freeing what it took)
  if (!kOwnMapping) {
    for (size_t bytes : sizes) {
      void* p = std::aligned_alloc(64, bytes ? bytes : 64);
      if (!p) {
        for (void* q : data_) std::free(q);
        throw std::bad_alloc();
      }
      data_.push_back(p);
    }
    return;
  }
  for (size_t bytes : sizes) mapped_ += bytes;
  mapped_ = mapped_ ? mapped_ : 64;
  void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  mapping_ = p;
  size_t offset = 0;
  for (size_t bytes : sizes) {
    data_.push_back(static_cast<char*>(p) + offset);
    offset += bytes;
  }
}

Chunk::~Chunk() {
  if (kOwnMapping) {
    munmap(mapping_, mapped_);
  } else {
    for (void* p : data_) std::free(p);
  }
}

std::unique_ptr<Chunk> ChunkPool::take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (spare_.empty()) return nullptr;
  std::unique_ptr<Chunk> chunk = std::move(spare_.back());
  spare_.pop_back();
  reused_.fetch_add(1, std::memory_order_relaxed);
  return chunk;
}

void ChunkPool::give(Chunk* chunk) noexcept {
  std::unique_ptr<Chunk> owned(chunk);
  std::lock_guard<std::mutex> lock(mu_);
  if (spare_.size() < kSpares) spare_.push_back(std::move(owned));  // within the reserved capacity
}  // else unmapped here, after the lock

std::shared_ptr<Chunk> RowTable::make_chunk(int64_t first) {
  std::unique_ptr<Chunk> chunk = pool_->take();
  if (chunk) {
    chunk->reuse(first);
  } else {
    chunk = std::make_unique<Chunk>(columns_, chunk_rows_, first);
    pool_->count_made();
  }
  // the deleter holds the pool: a chunk a reader keeps may outlive its table (if making the control block
  // throws, shared_ptr hands the chunk to the deleter)
  return std::shared_ptr<Chunk>(chunk.release(), [pool = pool_](Chunk* c) { pool->give(c); });
}

RowTable::RowTable(std::vector<Column> columns, int64_t chunk_rows) : columns_(std::move(columns)), chunk_rows_(chunk_rows) {
  current_owner_ = make_chunk(0);
  current_ = current_owner_.get();
  chunks_.push_back(current_owner_);
}

Chunk& RowTable::next_row(int64_t* row) {
  int64_t n = current_->rows();
  if (n == current_->capacity()) {
    auto next = make_chunk(current_->first() + n);
    std::lock_guard<std::mutex> lock(mu_);
    chunks_.push_back(next);
    current_owner_ = next;
    current_ = next.get();
    n = 0;
  }
  *row = n;
  return *current_;
}

int64_t RowTable::written() const { return current_->first() + current_->rows(); }

std::vector<std::shared_ptr<Chunk>> RowTable::chunks() {
  std::lock_guard<std::mutex> lock(mu_);
  return chunks_;
}

void RowTable::forget_before(int64_t before) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t drop = 0;
  while (drop + 1 < chunks_.size() && chunks_[drop]->first() + chunks_[drop]->capacity() <= before) ++drop;
  chunks_.erase(chunks_.begin(), chunks_.begin() + static_cast<std::ptrdiff_t>(drop));
}

TraceBuffer::TraceBuffer(int64_t chunk_rows)
    : events({{"node", 'i'}, {"phase", 'b'}, {"key", 'q'}, {"depth", 'i'}, {"messages", 'i'}, {"start", 'd'},
              {"end", 'd'}},
             chunk_rows),
      members({{"row", 'q'}, {"key", 'q'}, {"time", 'd'}}, chunk_rows),
      staleness({{"node", 'i'}, {"key", 'q'}, {"value", 'i'}, {"time", 'd'}}, chunk_rows) {}

void TraceBuffer::record(int32_t node, int8_t phase, int64_t key, double start, double end, int32_t depth,
                         int32_t messages) {
  int64_t i;
  Chunk& c = events.next_row(&i);
  c.column<int32_t>(0)[i] = node;
  c.column<int8_t>(1)[i] = phase;
  c.column<int64_t>(2)[i] = key;
  c.column<int32_t>(3)[i] = depth;
  c.column<int32_t>(4)[i] = messages;
  c.column<double>(5)[i] = start;
  c.column<double>(6)[i] = end;
  c.publish(i + 1);
}

void TraceBuffer::record_bundle(int32_t node, int8_t phase, Span<const int64_t> keys, double start, double end,
                                int32_t depth) {
  int64_t row = events.written();
  record(node, phase, keys[0], start, end, depth, static_cast<int32_t>(keys.size()));
  for (int64_t key : keys) {
    int64_t i;
    Chunk& c = members.next_row(&i);
    c.column<int64_t>(0)[i] = row;
    c.column<int64_t>(1)[i] = key;
    c.column<double>(2)[i] = start;
    c.publish(i + 1);
  }
}

void TraceBuffer::record_staleness(int32_t node, int64_t key, int32_t staleness_value, double time) {
  int64_t i;
  Chunk& c = staleness.next_row(&i);
  c.column<int32_t>(0)[i] = node;
  c.column<int64_t>(1)[i] = key;
  c.column<int32_t>(2)[i] = staleness_value;
  c.column<double>(3)[i] = time;
  c.publish(i + 1);
}

}  // namespace amp
