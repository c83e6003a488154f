// All distribution behind one small context (llm.c's MultiGpuConfig): rank, world, device, collectives.
// A process not launched by mpirun is a world of one and never touches MPI (the silent fast path).
// Only parallel/ includes mpi.h or nccl.h.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace ppo {

enum class ReduceOp { sum, max, min };

// What a rank does (parallel.rollout_ranks): both phases (colocated, the default), or one of them.
enum class Role { colocated, trainer, rollout };
// The ranks a collective spans: this rank's role (all of them when colocated; every collective's default), the whole
// job, or the weight sync's (the first trainer and the rollout ranks).
enum class Group { role, job, weight_sync };

struct Communicator;  // one group's MPI and NCCL communicators (context.cpp)

class Context {
 public:
  // Initialises MPI when launched by mpirun (else a world of one). Call once, first thing in main.
  static Context& init(int* argc, char*** argv);
  // The context made by init(); a world of one if init() was never called (tests).
  static Context& get();

  // This rank and the ranks of the group the collectives span (its role's, unless a Scope says otherwise).
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // In the whole job: its first rank writes the run directory and speaks for the job.
  int job_rank() const { return job_rank_; }
  int job_size() const { return job_size_; }
  bool is_root() const { return job_rank_ == 0; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  Role role() const { return role_; }
  // parallel.rollout_ranks: the last `rollout_ranks` ranks of the job generate (Role::rollout), the others train
  // (Role::trainer), each role with communicators of its own. 0: every rank does both (Role::colocated). Call once,
  // before any collective; check_config has checked that both roles have ranks.
  void split_roles(int rollout_ranks);

  // While a Scope lives, rank(), world_size() and the collectives are those of `group` (Group::weight_sync: only on
  // its members, the job's first rank and the rollout ranks).
  class Scope {
   public:
    Scope(Context& context, Group group);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Context& context_;
    Communicator* previous_;
  };
  // CUDA device `local_rank` when CUDA is available, else CPU.
  torch::Device device() const;
  // parallel.backend, the collectives of CUDA tensors (CPU tensors always go through MPI): "auto" (NCCL when this
  // build has it and every rank of the host has a GPU of its own, else MPI staged through host memory), "mpi"
  // (staged through host memory), "nccl" (required: a UsageError when this build has no NCCL, no CUDA device is
  // visible, or ranks of a host would share a GPU, which NCCL refuses).
  void set_backend(const std::string& backend);
  const std::string& backend() const { return backend_; }
  // More ranks on this host than visible GPUs: ranks share devices (local_rank % GPUs).
  bool shares_gpu() const;
  // trainer.num_threads: LibTorch intra-op threads of this rank (parallel/threads.h's rank_threads).
  void set_threads(int64_t requested);
  static const std::vector<std::string>& backend_names();  // auto, mpi, nccl
  // parallel.timeout_s: a watchdog ends the whole job (an `error:` line naming the rank and the collective, exit
  // status 1) when one collective has waited longer than `seconds`; 0 = no watchdog. World of one: nothing. Over
  // several hosts, rank 0 warns when Open MPI's keepalive would notice a lost host only after that
  // (scripts/two_hosts.sh).
  void set_timeout(double seconds);

  // parallel.check_collectives: before each collective the ranks compare what they are about to issue (its name,
  // dtype and size, one small MPI_Allgather): a rank whose sequence differs ends the job with an error naming every
  // rank's collective, where mismatched collectives would hang or mix data. World of one: nothing.
  void set_check_collectives(bool check) { check_collectives_ = check; }
  // Bytes this rank has sent in collectives so far, as a ring algorithm sends them (what the payloads handed to
  // MPI or NCCL imply, not a count taken from the transport): all_reduce of n bytes 2 n (W - 1) / W, reduce_scatter
  // of an n-byte input and all_gather_into an n-byte output n (W - 1) / W, all_gather of an n-byte tensor n (W - 1),
  // broadcast of n bytes n (W - 1) / W; the sequence check's and text gathers included.
  double bytes_sent() const { return bytes_sent_; }

  // Collectives; every rank must call them in the same order. world_size 1: no-ops.
  void all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::sum);  // in place, contiguous
  void broadcast(torch::Tensor& tensor, int root = 0);                  // in place, contiguous
  // Every rank's `tensor` (same shape on all ranks) concatenated along dimension 0, rank 0's first.
  torch::Tensor all_gather(const torch::Tensor& tensor);
  std::vector<std::string> all_gather(const std::string& value);  // variable-length data
  // ZeRO's two: `input` [W * S] (contiguous, its size a multiple of the world size W) summed over the ranks, and this
  // rank's slice [S] of the sum returned (MPI_Reduce_scatter_block, ncclReduceScatter). World of one: `input`.
  torch::Tensor reduce_scatter(const torch::Tensor& input);
  // Every rank's `slice` [S] written into `output` [W * S], rank r's at r * S (MPI_Allgather, ncclAllGather).
  void all_gather_into(const torch::Tensor& slice, torch::Tensor& output);
  void barrier();

  // Prints `message` (prefixed with the rank when world > 1) on stderr; with world > 1 aborts the whole job so no
  // peer hangs waiting in a collective.
  void fail(const std::string& message, int status);
  void finalize();

 private:
  Context();
  // The group the collectives span now; rank_ and world_size_ are its.
  void activate(Communicator* group);
  int rank_ = 0, world_size_ = 1, job_rank_ = 0, job_size_ = 1, local_rank_ = 0, local_size_ = 1;
  Role role_ = Role::colocated;
  bool mpi_ = false;
  std::string backend_ = "auto";
  // Indexed by Group; the role's is the job's when colocated. Communicator (context.cpp) holds the MPI communicator,
  // its NCCL communicator (created on its first CUDA collective) and the collectives issued on it.
  std::shared_ptr<Communicator> groups_[3];
  Communicator* active_ = nullptr;
  bool check_collectives_ = true;
  double bytes_sent_ = 0, last_sent_ = 0;
  void count_sent(double bytes, double factor) { bytes_sent_ += last_sent_ = bytes * factor; }
  // A CUDA tensor staged through host memory calls the collective again: count it once.
  void unstage();
  // parallel.check_collectives: every rank's (collective, dtype, size) compared before it is issued.
  void check_sequence(const char* name, const torch::Tensor& tensor);
  bool use_nccl(const torch::Tensor& t) const;  // a CUDA tensor, and the backend is not "mpi"
  void* nccl_comm();                            // the active group's, created on first use
};

}  // namespace ppo
