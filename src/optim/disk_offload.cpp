// Disk offload of optimizer state: every state tensor is a MAP_SHARED mapping of a region of
// one file per wrapper, and a step updates one parameter at a time with only its state mapped in.
#include "fsdpp/optim/disk_offload.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "fsdpp/optim/optimizer_state.h"

namespace fsdpp {

namespace fs = std::filesystem;

namespace {

using optim::OptimizerKind;

int64_t page_size() {
  static const int64_t kPage = ::sysconf(_SC_PAGESIZE);
  return kPage;
}

int64_t round_to_pages(int64_t n) {
  const int64_t p = page_size();
  return std::max<int64_t>(1, (n + p - 1) / p) * p;
}

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

struct DiskOffloadedOptimizer::Arena {
  int fd = -1;
  fs::path path;
  bool drop_page_cache = false;
  std::atomic<int64_t> mapped{0};

  std::mutex mu;  // guards what follows: a mapping's deleter runs wherever its tensor dies
  int64_t file_bytes = 0;
  std::vector<std::pair<int64_t, int64_t>> free_regions;  // (offset, bytes), page multiples

  // drop_page_cache: regions whose write-back was started and that are yet to be evicted.
  std::vector<std::pair<int64_t, int64_t>> writing;

  ~Arena() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

using Arena = DiskOffloadedOptimizer::Arena;

// One state tensor's region of the file, mapped; owned by the tensor's storage (its DataPtr
// context), so it is unmapped when the last tensor on it goes.
struct Mapping {
  std::shared_ptr<Arena> arena;
  void* addr = nullptr;
  int64_t offset = 0;
  int64_t bytes = 0;  // a page multiple
};

void unmap(void* ctx) {
  auto* m = static_cast<Mapping*>(ctx);
  ::munmap(m->addr, static_cast<size_t>(m->bytes));
  m->arena->mapped -= m->bytes;
  try {
    std::lock_guard<std::mutex> lock(m->arena->mu);
    m->arena->free_regions.emplace_back(m->offset, m->bytes);
  } catch (...) {
    // The region is lost to reuse (the file only grows); a deleter must not throw.
  }
  delete m;
}

// The mapping `t` lives in when it is all of one of `arena`'s mappings, else null. The deleter
// identifies the storage: a freed mapping's address may come back from malloc, its deleter not.
Mapping* mapping_of(const at::Tensor& t, const Arena* arena) {
  if (!t.defined() || !t.has_storage() || t.storage_offset() != 0) return nullptr;
  const auto& dp = t.storage().data_ptr();
  if (dp.get_deleter() != &unmap) return nullptr;
  auto* m = static_cast<Mapping*>(dp.get_context());
  return m->arena.get() == arena ? m : nullptr;
}

// A region of at least `nbytes` (reused, or added at the end of the file and reserved on disk
// so that writing it through the mapping can never fail for want of space), mapped.
// `fresh`: the region is new, so it reads as zeros.
Mapping* map_region(const std::shared_ptr<Arena>& arena, int64_t nbytes, bool* fresh) {
  const int64_t bytes = round_to_pages(nbytes);
  int64_t offset = -1;
  {
    std::lock_guard<std::mutex> lock(arena->mu);
    auto& fr = arena->free_regions;
    auto best = fr.end();
    for (auto it = fr.begin(); it != fr.end(); ++it) {
      if (it->second >= bytes && (best == fr.end() || it->second < best->second)) best = it;
    }
    if (best != fr.end()) {
      offset = best->first;
      if (best->second > bytes) {
        best->first += bytes;
        best->second -= bytes;
      } else {
        fr.erase(best);
      }
      *fresh = false;
    } else {
      offset = arena->file_bytes;
      const int rc = ::posix_fallocate(arena->fd, offset, bytes);
      if (rc != 0) {
        FSDPP_THROW(OffloadError,
                    "[offload] cannot grow the optimizer state file '{}' from {} to {} bytes: {}",
                    arena->path.string(), arena->file_bytes, arena->file_bytes + bytes,
                    errno_text(rc));
      }
      arena->file_bytes += bytes;
      *fresh = true;
    }
  }
  void* addr = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED,
                      arena->fd, offset);
  if (addr == MAP_FAILED) {
    const int e = errno;
    std::lock_guard<std::mutex> lock(arena->mu);
    arena->free_regions.emplace_back(offset, bytes);
    FSDPP_THROW(OffloadError, "[offload] cannot map {} bytes at offset {} of '{}': {}", bytes,
                offset, arena->path.string(), errno_text(e));
  }
  arena->mapped += bytes;
  return new Mapping{arena, addr, offset, bytes};
}

// A tensor of `dtype` with `sizes`/`strides` (dense, non-overlapping) over a new mapping.
at::Tensor mapped_tensor(const std::shared_ptr<Arena>& arena, at::ScalarType dtype,
                         at::IntArrayRef sizes, at::IntArrayRef strides, bool* fresh) {
  int64_t numel = 1;
  for (auto s : sizes) numel *= s;
  const int64_t nbytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  Mapping* m = map_region(arena, nbytes, fresh);
  // From here the DataPtr owns the mapping.
  c10::DataPtr dp(m->addr, m, &unmap, c10::Device(c10::kCPU));
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes), std::move(dp),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, sizes, strides);
}

// The state tensors of one parameter's optimizer state.
std::vector<at::Tensor*> state_tensors_of(torch::optim::OptimizerParamState& s, OptimizerKind kind) {
  FSDPP_CHECK_AS(OffloadError, optim::is_state_of(s, kind),
                 "[offload] an optimizer state entry is not of the optimizer's own state type; "
                 "expected the state its step() creates");
  std::vector<at::Tensor*> out;
  for (const auto& ref : optim::state_tensors(s, kind)) out.push_back(&ref.tensor);
  return out;
}

bool holds_data(const at::Tensor& t) { return t.defined() && t.numel() > 0; }

// Moves `t` into a new mapping (same layout when dense), unless it is in one already.
// Returns the mapping it is in afterwards, or null for an empty tensor.
Mapping* ensure_mapped(const std::shared_ptr<Arena>& arena, at::Tensor& t) {
  if (!holds_data(t)) return nullptr;
  if (Mapping* m = mapping_of(t, arena.get())) return m;
  FSDPP_CHECK_AS(OffloadError, t.device().is_cpu() && t.layout() == at::kStrided,
                 "[offload] optimizer state on {} ({} layout); disk offload holds dense CPU "
                 "state only (use CPU parameters, or CPU offload)",
                 t.device().str(), c10::str(t.layout()));
  const bool dense = t.is_non_overlapping_and_dense();
  std::vector<int64_t> strides(t.sizes().size());
  if (dense) {
    strides = t.strides().vec();
  } else {
    int64_t stride = 1;
    for (size_t d = strides.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= std::max<int64_t>(1, t.size(static_cast<int64_t>(d)));
    }
  }
  bool fresh = false;
  at::Tensor moved = mapped_tensor(arena, t.scalar_type(), t.sizes(), strides, &fresh);
  moved.copy_(t);
  Mapping* m = mapping_of(moved, arena.get());
  t = std::move(moved);  // frees the old storage when nothing else holds it
  return m;
}

void advise(const Mapping* m, int advice) {
  // Advice is a hint: a kernel without MADV_POPULATE_WRITE (before 5.14) just faults the pages.
  (void)::madvise(m->addr, static_cast<size_t>(m->bytes), advice);
}

// Unmaps the pages from the process; the data stays in the file (and the page cache).
void release_pages(const Mapping* m) {
  if (::madvise(m->addr, static_cast<size_t>(m->bytes), MADV_DONTNEED) != 0) {
    const int e = errno;
    FSDPP_THROW(OffloadError, "[offload] madvise(MADV_DONTNEED) on '{}' failed: {}",
                m->arena->path.string(), errno_text(e));
  }
}

// drop_page_cache: waits for the write-back started on `writing` and evicts those pages.
void evict_written(Arena& a) {
  for (const auto& [offset, bytes] : a.writing) {
    if (::sync_file_range(a.fd, offset, bytes,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
      const int e = errno;
      a.writing.clear();
      FSDPP_THROW(OffloadError, "[offload] writing optimizer state back to '{}' failed: {}",
                  a.path.string(), errno_text(e));
    }
    (void)::posix_fadvise(a.fd, offset, bytes, POSIX_FADV_DONTNEED);
  }
  a.writing.clear();
}

// drop_page_cache, at the end of a step: the last write-backs, then every clean page of the file
// out of the cache, also those that page-fault read-around brought in from neighbouring regions.
void evict_all(Arena& a) {
  evict_written(a);
  (void)::posix_fadvise(a.fd, 0, 0, POSIX_FADV_DONTNEED);
}

// drop_page_cache: starts writing `m` back; evict_written() finishes it one parameter later,
// so that the write overlaps the next parameter's update.
void start_write_back(Arena& a, const Mapping* m) {
  if (::sync_file_range(a.fd, m->offset, m->bytes, SYNC_FILE_RANGE_WRITE) != 0) {
    const int e = errno;
    FSDPP_THROW(OffloadError, "[offload] writing optimizer state back to '{}' failed: {}",
                a.path.string(), errno_text(e));
  }
  a.writing.emplace_back(m->offset, m->bytes);
}

}  // namespace

DiskOffloadedOptimizer::DiskOffloadedOptimizer(torch::optim::Optimizer& optimizer,
                                               DiskOffloadOptions options)
    : optimizer_(&optimizer) {
  init(std::move(options));
}

DiskOffloadedOptimizer::DiskOffloadedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                               DiskOffloadOptions options)
    : owned_(std::move(optimizer)), optimizer_(owned_.get()) {
  FSDPP_CHECK_AS(OffloadError, optimizer_, "[offload] the optimizer is null");
  init(std::move(options));
}

DiskOffloadedOptimizer::~DiskOffloadedOptimizer() = default;

void DiskOffloadedOptimizer::init(DiskOffloadOptions options) {
  const auto kind = optim::optimizer_kind(*optimizer_);
  FSDPP_CHECK_AS(OffloadError, kind.has_value(),
                 "[offload] disk offload supports {}; got another optimizer (LBFGS keeps state "
                 "across parameters)",
                 optim::supported_optimizers());
  kind_ = *kind;

  const fs::path& dir = options.dir;
  FSDPP_CHECK_AS(OffloadError, !dir.empty(),
                 "[offload] no directory for the optimizer state file; expected a path");
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (fs::exists(st)) {
    FSDPP_CHECK_AS(OffloadError, fs::is_directory(st),
                   "[offload] '{}' is not a directory; expected a directory for the optimizer "
                   "state file",
                   dir.string());
  } else {
    fs::create_directories(dir, ec);
    FSDPP_CHECK_AS(OffloadError, !ec, "[offload] cannot create directory '{}': {}", dir.string(),
                   ec.message());
  }

  auto arena = std::make_shared<Arena>();
  arena->drop_page_cache = options.drop_page_cache;
  std::string name = (dir / fmt::format("fsdpp-optim-rank{}-XXXXXX", options.rank)).string();
  std::vector<char> buf(name.begin(), name.end());
  buf.push_back('\0');
  arena->fd = ::mkostemp(buf.data(), O_CLOEXEC);
  if (arena->fd < 0) {
    const int e = errno;
    FSDPP_THROW(OffloadError, "[offload] cannot create the optimizer state file in '{}': {}",
                dir.string(), errno_text(e));
  }
  arena->path = buf.data();
  if (!options.keep_file) ::unlink(buf.data());

  // One page through the whole path now, so that a file system that cannot hold or map the
  // file fails here rather than at the first step; the page is the first free region.
  bool fresh = false;
  Mapping* probe = map_region(arena, 1, &fresh);
  static_cast<volatile char*>(probe->addr)[0] = 0;
  unmap(probe);
  arena_ = std::move(arena);
}

void DiskOffloadedOptimizer::zero_grad(bool set_to_none) { optimizer_->zero_grad(set_to_none); }

const fs::path& DiskOffloadedOptimizer::file() const { return arena_->path; }

at::Tensor DiskOffloadedOptimizer::step(torch::optim::Optimizer::LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  // The parameters with a gradient, in the optimizer's order, and their gradients.
  std::vector<at::Tensor> params, grads;
  std::vector<optim::StateConfig> configs;  // what each parameter's first step creates
  std::unordered_set<const void*> seen;
  for (auto& group : optimizer_->param_groups()) {
    const auto config = optim::state_config(group.options(), kind_);
    for (auto& p : group.params()) {
      if (!p.grad().defined() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
      FSDPP_CHECK_AS(OffloadError, p.device().is_cpu(),
                     "[offload] a parameter of shape {} is on {}; disk offload holds the state "
                     "of CPU parameters only (use CPU parameters, or CPU offload)",
                     c10::str(p.sizes()), p.device().str());
      params.push_back(p);
      grads.push_back(p.grad());
      configs.push_back(config);
    }
  }
  // Every gradient hidden, then shown one at a time: the optimizer's step() updates just that
  // parameter. The guard gives every gradient back, also when a step throws.
  struct Restore {
    std::vector<at::Tensor>& params;
    std::vector<at::Tensor>& grads;
    ~Restore() {
      for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i];
    }
  } restore{params, grads};
  for (auto& p : params) p.mutable_grad() = at::Tensor();

  at::NoGradGuard no_grad;
  auto& state = optimizer_->state();
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    std::vector<Mapping*> maps;
    auto it = state.find(p.unsafeGetTensorImpl());
    if (it != state.end() && it->second) {
      for (at::Tensor* t : state_tensors_of(*it->second, kind_)) {
        if (Mapping* m = ensure_mapped(arena_, *t)) maps.push_back(m);
      }
    } else if ((kind_ == OptimizerKind::ADAMW || kind_ == OptimizerKind::ADAM) && p.numel() > 0 &&
               p.is_non_overlapping_and_dense()) {
      // The state Adam's step() would make (zeros like the parameter, step 0), made in the file
      // directly: no in-memory copy to allocate and move.
      auto s = optim::new_param_state(kind_);
      const auto created = optim::created_state_names(kind_, configs[i]);
      for (const auto& ref : optim::state_tensors(*s, kind_)) {
        if (std::find(created.begin(), created.end(), ref.name) == created.end()) continue;
        bool fresh = false;
        ref.tensor = mapped_tensor(arena_, p.scalar_type(), p.sizes(), p.strides(), &fresh);
        if (!fresh) ref.tensor.zero_();
        maps.push_back(mapping_of(ref.tensor, arena_.get()));
      }
      state[p.unsafeGetTensorImpl()] = std::move(s);
    }
    // Fault the state in writable in one call rather than a read and a write fault per page,
    // and start reading the next parameter's state in the background.
    for (Mapping* m : maps) advise(m, MADV_POPULATE_WRITE);
    if (i + 1 < params.size()) {
      auto next = state.find(params[i + 1].unsafeGetTensorImpl());
      if (next != state.end() && next->second) {
        for (at::Tensor* t : state_tensors_of(*next->second, kind_)) {
          if (Mapping* m = mapping_of(*t, arena_.get())) advise(m, MADV_WILLNEED);
        }
      }
    }

    p.mutable_grad() = grads[i];
    optimizer_->step();
    p.mutable_grad() = at::Tensor();

    // State the step made itself (SGD's momentum buffer is a copy of the first gradient) goes
    // into the file now; then the parameter's state leaves the process.
    maps.clear();
    it = state.find(p.unsafeGetTensorImpl());
    if (it != state.end() && it->second) {
      for (at::Tensor* t : state_tensors_of(*it->second, kind_)) {
        if (Mapping* m = ensure_mapped(arena_, *t)) maps.push_back(m);
      }
    }
    if (arena_->drop_page_cache) evict_written(*arena_);
    for (Mapping* m : maps) {
      release_pages(m);
      if (arena_->drop_page_cache) start_write_back(*arena_, m);
    }
  }
  if (arena_->drop_page_cache) evict_all(*arena_);
  return loss;
}

void DiskOffloadedOptimizer::offload_state() {
  at::NoGradGuard no_grad;
  for (auto& [key, s] : optimizer_->state()) {
    if (!s) continue;
    for (at::Tensor* t : state_tensors_of(*s, kind_)) {
      // One tensor at a time, released at once, so that moving adds one tensor's pages at most.
      if (Mapping* m = ensure_mapped(arena_, *t)) release_pages(m);
    }
  }
  release();
}

void DiskOffloadedOptimizer::release() {
  for (auto& [key, s] : optimizer_->state()) {
    if (!s) continue;
    for (at::Tensor* t : state_tensors_of(*s, kind_)) {
      if (Mapping* m = mapping_of(*t, arena_.get())) {
        release_pages(m);
        if (arena_->drop_page_cache) start_write_back(*arena_, m);
      }
    }
  }
  if (arena_->drop_page_cache) evict_all(*arena_);
}

int64_t DiskOffloadedOptimizer::mapped_bytes() const { return arena_->mapped.load(); }

int64_t DiskOffloadedOptimizer::unmapped_bytes() const {
  int64_t total = 0;
  for (auto& [key, s] : optimizer_->state()) {
    if (!s) continue;
    for (at::Tensor* t : state_tensors_of(*s, kind_)) {
      if (holds_data(*t) && !mapping_of(*t, arena_.get())) total += t->nbytes();
    }
  }
  return total;
}

namespace {
// The distinct mappings the optimizer's state is in now.
std::vector<const Mapping*> live_mappings(torch::optim::Optimizer& opt, OptimizerKind kind,
                                          const Arena* arena) {
  std::vector<const Mapping*> out;
  std::unordered_set<const Mapping*> seen;
  for (auto& [key, s] : opt.state()) {
    if (!s) continue;
    for (at::Tensor* t : state_tensors_of(*s, kind)) {
      const Mapping* m = mapping_of(*t, arena);
      if (m && seen.insert(m).second) out.push_back(m);
    }
  }
  return out;
}
}  // namespace

int64_t DiskOffloadedOptimizer::resident_bytes() const {
  // /proc/self/pagemap: one 64-bit entry per virtual page, bit 63 set when the page is present
  // in this process's page tables.
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    FSDPP_THROW(OffloadError, "[offload] cannot open /proc/self/pagemap: {}", errno_text(e));
  }
  const int64_t page = page_size();
  int64_t pages = 0;
  std::vector<uint64_t> entries;
  for (const Mapping* m : live_mappings(*optimizer_, kind_, arena_.get())) {
    const int64_t n = m->bytes / page;
    entries.resize(static_cast<size_t>(n));
    const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(m->addr) / page * 8);
    const ssize_t got = ::pread(fd, entries.data(), static_cast<size_t>(n) * 8, at);
    if (got != n * 8) {
      const int e = errno;
      ::close(fd);
      FSDPP_THROW(OffloadError, "[offload] reading /proc/self/pagemap failed: {}",
                  got < 0 ? errno_text(e) : "short read");
    }
    for (uint64_t v : entries) pages += (v >> 63) & 1;
  }
  ::close(fd);
  return pages * page;
}

int64_t DiskOffloadedOptimizer::cached_bytes() const {
  const int64_t page = page_size();
  int64_t pages = 0;
  std::vector<unsigned char> vec;
  for (const Mapping* m : live_mappings(*optimizer_, kind_, arena_.get())) {
    vec.resize(static_cast<size_t>(m->bytes / page));
    if (::mincore(m->addr, static_cast<size_t>(m->bytes), vec.data()) != 0) {
      const int e = errno;
      FSDPP_THROW(OffloadError, "[offload] mincore on '{}' failed: {}", arena_->path.string(),
                  errno_text(e));
    }
    for (unsigned char c : vec) pages += c & 1;
  }
  return pages * page;
}

}  // namespace fsdpp
