// MPI (CPU tensors) and NCCL (CUDA tensors) behind ppo::Context. Every call is checked, with location and hint.
#include "parallel/context.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/strings.h"
#include "parallel/threads.h"
#include "parallel/watchdog.h"

#ifdef PPO_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace ppo {
namespace {

Context* g_context = nullptr;

#ifdef PPO_WITH_CUDA
// NCCL collectives return once queued: with a watchdog, wait for completion here, where it is watched.
void wait_for_nccl() {
  if (watchdog_timeout() > 0.0 && cudaStreamSynchronize(nullptr) != cudaSuccess)
    throw std::runtime_error("an NCCL collective failed on the device (cudaStreamSynchronize)");
}
#endif

void mpi_check(int status, const char* call, const char* file, int line) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw std::runtime_error(std::string("MPI error in ") + call + " at " + file + ":" + std::to_string(line) + ": " +
                           std::string(text, length) +
                           "\n---> HINT: are all ranks running the same program with the same config?");
}
#define MPI_CHECK(call) mpi_check((call), #call, __FILE__, __LINE__)

#ifdef PPO_WITH_CUDA
void nccl_check(ncclResult_t status, const char* call, const char* file, int line) {
  if (status == ncclSuccess) return;
  throw std::runtime_error(std::string("NCCL error in ") + call + " at " + file + ":" + std::to_string(line) + ": " +
                           ncclGetErrorString(status) +
                           "\n---> HINT: NCCL needs one GPU per rank; set parallel.backend=mpi to share a GPU");
}
#define NCCL_CHECK(call) nccl_check((call), #call, __FILE__, __LINE__)
#endif

MPI_Datatype mpi_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32:
      return MPI_FLOAT;
    case torch::kFloat64:
      return MPI_DOUBLE;
    case torch::kInt64:
      return MPI_INT64_T;
    case torch::kInt32:
      return MPI_INT32_T;
    case torch::kUInt8:
      return MPI_UINT8_T;
    case torch::kBool:
      return MPI_C_BOOL;
    default:
      throw std::runtime_error(std::string("collective on unsupported dtype ") + toString(t.scalar_type()));
  }
}

#ifdef PPO_WITH_CUDA
ncclDataType_t nccl_type(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32:
      return ncclFloat32;
    case torch::kFloat64:
      return ncclFloat64;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kFloat16:
      return ncclFloat16;
    case torch::kInt64:
      return ncclInt64;
    case torch::kInt32:
      return ncclInt32;
    case torch::kUInt8:
      return ncclUint8;
    default:
      throw std::runtime_error(std::string("NCCL collective on unsupported dtype ") + toString(t.scalar_type()));
  }
}
#endif

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::sum ? MPI_SUM : op == ReduceOp::max ? MPI_MAX : MPI_MIN;
}

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"})
    if (std::getenv(var)) return true;
  return false;
}

}  // namespace

struct Communicator {
  MPI_Comm comm = MPI_COMM_NULL;  // MPI_COMM_WORLD for the job; null in a world of one
  int rank = 0, size = 1;
  bool member = true;    // false: this rank is not in the group (weight_sync on a trainer after the first)
  int64_t issued = 0;    // collectives issued on it so far (their position in the sequence its ranks share)
  void* nccl = nullptr;  // ncclComm_t, created on its first CUDA collective
};

Context::Context() {
  const auto one = std::make_shared<Communicator>();
  for (auto& group : groups_) group = one;
  active_ = one.get();
}

void Context::activate(Communicator* group) {
  active_ = group;
  rank_ = group->rank;
  world_size_ = group->size;
}

void Context::unstage() {
  --active_->issued;
  bytes_sent_ -= last_sent_;
}

Context::Scope::Scope(Context& context, Group group) : context_(context), previous_(context.active_) {
  Communicator* next = context.groups_[static_cast<int>(group)].get();
  if (!next->member) throw std::logic_error("Context::Scope: this rank is not in the weight-sync group");
  context.activate(next);
}

Context::Scope::~Scope() {
  context_.activate(previous_);
}

void Context::split_roles(int rollout_ranks) {
  if (rollout_ranks <= 0) return;
  if (rollout_ranks >= job_size_)
    throw UsageError("parallel.rollout_ranks=" + std::to_string(rollout_ranks) + " leaves no trainer rank of the " +
                     std::to_string(job_size_) + "; use 1.." + std::to_string(job_size_ - 1));
  role_ = job_rank_ >= job_size_ - rollout_ranks ? Role::rollout : Role::trainer;
  // New communicators inherit MPI_COMM_WORLD's error handler (errors return, MPI_CHECK throws).
  auto split = [&](int color) {
    auto group = std::make_shared<Communicator>();
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, job_rank_, &group->comm));
    if (group->comm == MPI_COMM_NULL) {
      group->member = false;
      return group;
    }
    MPI_CHECK(MPI_Comm_rank(group->comm, &group->rank));
    MPI_CHECK(MPI_Comm_size(group->comm, &group->size));
    return group;
  };
  groups_[static_cast<int>(Group::role)] = split(role_ == Role::rollout ? 1 : 0);
  groups_[static_cast<int>(Group::weight_sync)] = split(job_rank_ == 0 || role_ == Role::rollout ? 0 : MPI_UNDEFINED);
  activate(groups_[static_cast<int>(Group::role)].get());
}

Context& Context::init(int* argc, char*** argv) {
  if (g_context) return *g_context;
  g_context = new Context();
  Context& c = *g_context;
  if (!launched_by_mpirun()) return c;
  MPI_CHECK(MPI_Init(argc, argv));
  c.mpi_ = true;
  const auto job = std::make_shared<Communicator>();
  job->comm = MPI_COMM_WORLD;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &job->rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &job->size));
  for (auto& group : c.groups_) group = job;
  c.activate(job.get());
  c.job_rank_ = job->rank;
  c.job_size_ = job->size;
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c.job_rank_, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &c.local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &c.local_size_));
  MPI_CHECK(MPI_Comm_free(&local));
  // MPI errors come back as return codes, which MPI_CHECK turns into exceptions with a location and a hint; main
  // catches them and Context::fail aborts the whole job, so no peer is left waiting in a collective.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  end_start_up();  // main's bound on MPI_Init (begin_start_up)
  return c;
}

Context& Context::get() {
  if (!g_context) g_context = new Context();
  return *g_context;
}

torch::Device Context::device() const {
  if (torch::cuda::is_available()) return torch::Device(torch::kCUDA, local_rank_ % torch::cuda::device_count());
  return torch::kCPU;
}

const std::vector<std::string>& Context::backend_names() {
  static const std::vector<std::string> names = {"auto", "mpi", "nccl"};
  return names;
}

void Context::set_backend(const std::string& backend) {
  const auto& names = backend_names();
  if (std::find(names.begin(), names.end(), backend) == names.end()) {
    throw UsageError("parallel.backend: unknown backend '" + backend + "'; valid: " + join(names, ", "));
  }
#ifdef PPO_WITH_CUDA
  const bool has_nccl = true;
#else
  const bool has_nccl = false;
#endif
  usage_check(backend != "nccl" || (has_nccl && torch::cuda::is_available()),
              std::string("parallel.backend=nccl needs ") +
                  (has_nccl ? "a CUDA device, and none is visible" : "a build with CUDA and NCCL (PPO_WITH_CUDA)") +
                  "; use auto or mpi");
  // NCCL refuses two ranks of one communicator on the same GPU ("Duplicate GPU detected"): say so before any model is
  // built, and let auto share the GPU through MPI.
  usage_check(backend != "nccl" || !shares_gpu(),
              "parallel.backend=nccl needs one GPU per rank, and " + std::to_string(local_size_) +
                  " ranks on this host share " + std::to_string(torch::cuda::device_count()) +
                  " GPU(s): use parallel.backend=mpi (or auto), or run as many ranks per host as GPUs");
  backend_ = backend;
}

bool Context::shares_gpu() const {
  return torch::cuda::is_available() && local_size_ > torch::cuda::device_count();
}

void Context::set_timeout(double seconds) {
  set_watchdog_timeout(seconds);
  if (job_size_ > 1 && seconds > 0.0) {
    start_watchdog(job_rank_);
    warn_if_lost_host_outlasts(seconds, job_rank_, /*several_hosts=*/local_size_ < job_size_);
  }
}

void Context::set_threads(int64_t requested) {
  torch::set_num_threads(static_cast<int>(rank_threads(requested, local_size_, /*warn=*/job_rank_ == 0)));
}

bool Context::use_nccl(const torch::Tensor& t) const {
#ifdef PPO_WITH_CUDA
  return t.is_cuda() && (backend_ == "nccl" || (backend_ == "auto" && !shares_gpu()));
#else
  return false;
#endif
}

void* Context::nccl_comm() {
#ifdef PPO_WITH_CUDA
  if (!active_->nccl) {
    ncclUniqueId id;
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, active_->comm));
    ncclComm_t comm;
    NCCL_CHECK(ncclCommInitRank(&comm, world_size_, id, rank_));
    active_->nccl = comm;
  }
#endif
  return active_->nccl;
}

// The collectives' codes in the sequence check, and their names for its message.
enum CollectiveCode : int64_t {
  kAllReduce = 1,
  kBroadcast,
  kAllGather,
  kAllGatherText,
  kReduceScatter,
  kAllGatherInto,
  kBarrier
};
const char* collective_name(int64_t code) {
  static const char* names[] = {
      "?",      "all_reduce", "broadcast", "all_gather", "all_gather (text)", "reduce_scatter", "all_gather_into",
      "barrier"};
  return code >= 1 && code <= 7 ? names[code] : names[0];
}

void Context::check_sequence(const char* name, const torch::Tensor& t) {
  const int64_t issued = ++active_->issued;
  if (!check_collectives_ || world_size_ == 1) return;
  int64_t code = 0;
  for (int64_t c = 1; c <= 7; ++c)
    if (std::string(collective_name(c)) == name) code = c;
  // What every rank is about to issue; text gathers differ in length by design, so only the kind is compared there.
  const bool sized = t.defined();
  int64_t mine[4] = {issued, code, sized ? static_cast<int64_t>(t.scalar_type()) : -1, sized ? t.numel() : -1};
  std::vector<int64_t> all(4 * static_cast<size_t>(world_size_));
  MPI_CHECK(MPI_Allgather(mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, active_->comm));
  count_sent(sizeof(mine), world_size_ - 1);
  bool same = true;
  for (int r = 1; r < world_size_; ++r)
    for (int k = 0; k < 4; ++k) same = same && all[4 * r + k] == all[k];
  if (same) return;
  std::ostringstream out;
  out << "ranks issue different collectives at collective " << issued << ":";
  for (int r = 0; r < world_size_; ++r) {
    const int64_t* s = &all[4 * static_cast<size_t>(r)];
    out << (r ? ";" : "") << " rank " << r << " " << collective_name(s[1]);
    if (s[2] >= 0) out << " of " << s[3] << " " << toString(static_cast<c10::ScalarType>(s[2]));
    if (s[0] != issued) out << " (its collective " << s[0] << ")";
  }
  out << "\n---> HINT: every rank must run the same build and config; this is a bug when they do";
  throw std::runtime_error(out.str());
}

void Context::all_reduce(torch::Tensor& t, ReduceOp op) {
  if (world_size_ == 1) return;
  Waiting waiting("all_reduce");
  check_sequence("all_reduce", t);
  count_sent(static_cast<double>(t.nbytes()), 2.0 * (world_size_ - 1) / world_size_);
  TORCH_CHECK(t.is_contiguous(), "all_reduce needs a contiguous tensor");
#ifdef PPO_WITH_CUDA
  if (use_nccl(t)) {
    ncclRedOp_t nop = op == ReduceOp::sum ? ncclSum : op == ReduceOp::max ? ncclMax : ncclMin;
    NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), nop,
                             static_cast<ncclComm_t>(nccl_comm()), nullptr));
    wait_for_nccl();
    return;
  }
#endif
  if (t.is_cuda()) {  // MPI backend for CUDA tensors: stage through host memory.
    torch::Tensor host = t.cpu();
    unstage();  // the staged call is the same collective
    all_reduce(host, op);
    t.copy_(host);
    return;
  }
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), t.numel(), mpi_type(t), mpi_op(op), active_->comm));
}

void Context::broadcast(torch::Tensor& t, int root) {
  if (world_size_ == 1) return;
  Waiting waiting("broadcast");
  check_sequence("broadcast", t);
  count_sent(static_cast<double>(t.nbytes()), (world_size_ - 1.0) / world_size_);
  TORCH_CHECK(t.is_contiguous(), "broadcast needs a contiguous tensor");
#ifdef PPO_WITH_CUDA
  if (use_nccl(t)) {
    NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), nccl_type(t), root,
                             static_cast<ncclComm_t>(nccl_comm()), nullptr));
    wait_for_nccl();
    return;
  }
#endif
  if (t.is_cuda()) {
    torch::Tensor host = t.cpu();
    unstage();
    broadcast(host, root);
    t.copy_(host);
    return;
  }
  // Nothing is summed: any dtype travels as its bytes, in calls of at most 1 GiB (MPI counts are ints).
  char* bytes = static_cast<char*>(t.data_ptr());
  for (size_t done = 0, total = t.nbytes(); done < total;) {
    const int chunk = static_cast<int>(std::min<size_t>(total - done, size_t{1} << 30));
    MPI_CHECK(MPI_Bcast(bytes + done, chunk, MPI_BYTE, root, active_->comm));
    done += chunk;
  }
}

torch::Tensor Context::all_gather(const torch::Tensor& tensor) {
  if (world_size_ == 1) return tensor;
  Waiting waiting("all_gather");
  check_sequence("all_gather", tensor);
  count_sent(static_cast<double>(tensor.nbytes()), world_size_ - 1);
  const torch::Tensor in = tensor.contiguous();
  std::vector<int64_t> shape = in.sizes().vec();
  TORCH_CHECK(!shape.empty(), "all_gather needs a tensor with a first dimension");
  shape[0] *= world_size_;
  torch::Tensor out = torch::empty(shape, in.options());
#ifdef PPO_WITH_CUDA
  if (use_nccl(in)) {
    NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in),
                             static_cast<ncclComm_t>(nccl_comm()), nullptr));
    wait_for_nccl();
    return out;
  }
#endif
  if (in.is_cuda()) {  // MPI backend: stage through host memory
    unstage();
    return all_gather(in.cpu()).to(in.device());
  }
  const int count = static_cast<int>(in.numel());
  MPI_CHECK(MPI_Allgather(in.data_ptr(), count, mpi_type(in), out.data_ptr(), count, mpi_type(in), active_->comm));
  return out;
}

std::vector<std::string> Context::all_gather(const std::string& value) {
  if (world_size_ == 1) return {value};
  Waiting waiting("all_gather");
  check_sequence("all_gather (text)", torch::Tensor());
  count_sent(static_cast<double>(value.size() + sizeof(int)), world_size_ - 1);
  int length = static_cast<int>(value.size());
  std::vector<int> lengths(world_size_), offsets(world_size_);
  MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, active_->comm));
  int total = 0;
  for (int r = 0; r < world_size_; ++r) offsets[r] = total, total += lengths[r];
  std::string all(total, '\0');
  MPI_CHECK(MPI_Allgatherv(value.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                           active_->comm));
  std::vector<std::string> out;
  for (int r = 0; r < world_size_; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
  return out;
}

void Context::barrier() {
  if (world_size_ == 1) return;
  Waiting waiting("barrier");
  check_sequence("barrier", torch::Tensor());
  MPI_CHECK(MPI_Barrier(active_->comm));
}

torch::Tensor Context::reduce_scatter(const torch::Tensor& input) {
  if (world_size_ == 1) return input;
  Waiting waiting("reduce_scatter");
  check_sequence("reduce_scatter", input);
  count_sent(static_cast<double>(input.nbytes()), (world_size_ - 1.0) / world_size_);
  TORCH_CHECK(input.is_contiguous() && input.dim() == 1 && input.numel() % world_size_ == 0,
              "reduce_scatter needs a contiguous flat tensor whose size is a multiple of the world size");
  const int64_t count = input.numel() / world_size_;
  torch::Tensor out = torch::empty({count}, input.options());
#ifdef PPO_WITH_CUDA
  if (use_nccl(input)) {
    NCCL_CHECK(ncclReduceScatter(input.data_ptr(), out.data_ptr(), count, nccl_type(input), ncclSum,
                                 static_cast<ncclComm_t>(nccl_comm()), nullptr));
    wait_for_nccl();
    return out;
  }
#endif
  if (input.is_cuda() || input.element_size() == 2) {  // MPI: through host memory, 16-bit floats summed in float32
    unstage();
    return reduce_scatter(input.to(torch::kCPU, torch::kFloat)).to(input.device(), input.scalar_type());
  }
  TORCH_CHECK(count <= std::numeric_limits<int>::max(), "reduce_scatter: slice too large for one MPI call");
  MPI_CHECK(MPI_Reduce_scatter_block(input.data_ptr(), out.data_ptr(), static_cast<int>(count), mpi_type(input),
                                     MPI_SUM, active_->comm));
  return out;
}

void Context::all_gather_into(const torch::Tensor& slice, torch::Tensor& output) {
  TORCH_CHECK(output.is_contiguous() && output.numel() == slice.numel() * world_size_ &&
                  output.scalar_type() == slice.scalar_type(),
              "all_gather_into: the output must be a contiguous tensor of world size x the slice's elements");
  if (world_size_ == 1) {
    if (!output.is_same(slice)) output.view({-1}).copy_(slice.reshape({-1}));
    return;
  }
  Waiting waiting("all_gather_into");
  check_sequence("all_gather_into", slice);
  count_sent(static_cast<double>(output.nbytes()), (world_size_ - 1.0) / world_size_);
  const torch::Tensor in = slice.contiguous();
#ifdef PPO_WITH_CUDA
  if (use_nccl(in)) {
    NCCL_CHECK(ncclAllGather(in.data_ptr(), output.data_ptr(), in.numel(), nccl_type(in),
                             static_cast<ncclComm_t>(nccl_comm()), nullptr));
    wait_for_nccl();
    return;
  }
#endif
  if (in.is_cuda() || output.is_cuda()) {  // MPI backend: stage through host memory
    torch::Tensor host = torch::empty({output.numel()}, output.options().device(torch::kCPU));
    unstage();
    all_gather_into(in.cpu(), host);
    output.view({-1}).copy_(host);
    return;
  }
  // Nothing is summed: any dtype travels as its bytes.
  TORCH_CHECK(in.nbytes() <= static_cast<size_t>(std::numeric_limits<int>::max()),
              "all_gather_into: slice too large for one MPI call");
  const int bytes = static_cast<int>(in.nbytes());
  MPI_CHECK(MPI_Allgather(in.data_ptr(), bytes, MPI_BYTE, output.data_ptr(), bytes, MPI_BYTE, active_->comm));
}

void Context::fail(const std::string& message, int status) {
  if (job_size_ > 1) {
    // A usage error is usually seen by every rank at once: let rank 0 speak for them (its abort ends the others).
    if (job_rank_ != 0 && status == 2) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::string line = message;
    if (line.rfind("error: ", 0) == 0) line.insert(7, "[rank " + std::to_string(job_rank_) + "] ");
    std::cerr << line << std::endl;
    MPI_Abort(MPI_COMM_WORLD, status);
  }
  std::cerr << message << std::endl;
}

void Context::finalize() {
  stop_watchdog();
  for (auto& group : groups_) {
#ifdef PPO_WITH_CUDA
    if (group->nccl) ncclCommDestroy(static_cast<ncclComm_t>(group->nccl));
    group->nccl = nullptr;
#endif
    if (mpi_ && group->comm != MPI_COMM_NULL && group->comm != MPI_COMM_WORLD) MPI_Comm_free(&group->comm);
  }
  if (mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
    mpi_ = false;
  }
}

}  // namespace ppo
