// Writes the seed corpora of the fuzz targets, made by accord's own encoders
// (the negotiation messages, the launcher's reports and host lists) plus a
// few edge cases, one file per input:
//   make_corpus <directory>   ->  <directory>/<target>/<seed name>
// tests/fuzz/corpus/ was made this way (and grown by fuzzing, then merged).
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dlpack_view_input.h"
#include "hosts.h"
#include "negotiation/message.h"
#include "report.h"
#include "shell_words.h"

namespace {

using namespace accord;
using namespace accord::launcher;

std::string g_root;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = g_root + "/" + target;
  mkdir(g_root.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
}

std::string U16(size_t n) { return std::string{static_cast<char>(n & 0xff), static_cast<char>(n >> 8 & 0xff)}; }

Request MakeRequest(const std::string& name, OpType type, Shape shape) {
  Request r;
  r.name = name;
  r.type = type;
  r.shape = std::move(shape);
  return r;
}

void NegotiationSeeds() {
  Request allreduce = MakeRequest("layer1.weight", OpType::kAllreduce, {4, 3});
  allreduce.op = ReduceOp::kAverage;
  allreduce.prescale_factor = 0.5;
  Request allgather = MakeRequest("embeddings", OpType::kAllgather, {2, 8});
  allgather.dtype = DataType::kFloat16;
  allgather.group = "grads";
  allgather.group_size = 2;
  Request alltoall = MakeRequest("tokens", OpType::kAlltoall, {6, 2});
  alltoall.splits = {1, 2, 3};
  alltoall.dtype = DataType::kInt64;
  alltoall.device = Device::CUDA(1);
  Request broadcast = MakeRequest("params", OpType::kBroadcast, {10});
  broadcast.root_rank = 1;
  Request add_set = MakeRequest("__accord.add_set", OpType::kAddProcessSet, {});
  add_set.ranks = {0, 2};
  Request join = MakeRequest(kJoinName, OpType::kJoin, {});
  const std::vector<Request> all = {allreduce, allgather, alltoall, broadcast, add_set, join};

  Write("negotiation_wire", "requests_empty", '\0' + SerializeRequests({}));
  Write("negotiation_wire", "requests_one", '\0' + SerializeRequests({allreduce}));
  Write("negotiation_wire", "requests_all_ops", '\0' + SerializeRequests(all));
  Write("negotiation_wire", "requests_huge_count", std::string("\0\xff\xff\xff\xff", 5));

  ResponseList list;
  Response plan;
  plan.name = "layer1.weight";
  plan.shape = {4, 3};
  Response gathered;
  gathered.type = OpType::kAllgather;
  gathered.name = "embeddings";
  gathered.shape = {2, 8};
  gathered.rank_rows = {2, 5, 1};
  Response error;
  error.name = "bad";
  error.error_code = StatusCode::kMismatch;
  error.error_message = "accord: allreduce of tensor 'bad': ranks disagree on the dtype";
  list.responses = {plan, gathered, error};
  list.evictions = {"old.tensor"};
  list.tuning = TuningChoice{32 << 20, 2.5, false, true};
  Write("negotiation_wire", "responses_empty", '\1' + SerializeResponseList({}));
  Write("negotiation_wire", "responses_full", '\1' + SerializeResponseList(list));
  ResponseList stop;
  stop.join_started = true;
  stop.stop_message = "accord was shut down by rank 1 (it called Shutdown)";
  Write("negotiation_wire", "responses_stop", '\1' + SerializeResponseList(stop));

  Write("negotiation_wire", "envelope_empty", '\2' + SerializeEnvelope("", false, {}));
  Write("negotiation_wire", "envelope_requests", '\2' + SerializeEnvelope("", false, all));
  Write("negotiation_wire", "envelope_failed", '\2' + SerializeEnvelope("rank 1 failed: out of memory", true, {}));

  // The coordinator: the set size, then a round of one envelope per rank.
  auto round = [](const std::vector<std::vector<Request>>& by_rank) {
    std::string bytes;
    for (const auto& requests : by_rank) {
      const std::string envelope = SerializeEnvelope("", false, requests);
      bytes += U16(envelope.size()) + envelope;
    }
    return bytes;
  };
  auto set = [](int size) { return std::string(1, static_cast<char>(size - 1)); };
  Write("negotiation_coordinator", "allreduce_2", set(2) + round({{allreduce}, {allreduce}}));
  Request other_dtype = allreduce;
  other_dtype.dtype = DataType::kInt32;
  Write("negotiation_coordinator", "mismatch_2", set(2) + round({{allreduce}, {other_dtype}}));
  Request alltoall1 = alltoall, alltoall2 = alltoall;
  alltoall1.shape = {3, 2};
  alltoall1.splits = {0, 0, 3};
  alltoall2.shape = {3, 2};
  alltoall2.splits = {};
  Write("negotiation_coordinator", "alltoall_3", set(3) + round({{alltoall}, {alltoall1}, {alltoall2}}));
  Write("negotiation_coordinator", "join_2", set(2) + round({{allreduce}, {join}}) + round({{join}, {}}));
  Request allgather2 = allgather;
  allgather2.name = "embeddings2";
  Write("negotiation_coordinator", "group_4",
        set(4) + round({{allgather}, {allgather}, {allgather}, {allgather}}) +
            round({{allgather2}, {allgather2}, {allgather2}, {allgather2}}));
  Request bad_root = broadcast;
  bad_root.root_rank = 7;
  Write("negotiation_coordinator", "broadcast_root_1", set(1) + round({{bad_root}}) + round({{add_set}}));
}

void ConfigSeeds() {
  Write("config_env", "all_valid",
        "ACCORD_FUSION_THRESHOLD=67108864\nACCORD_STAGING_WINDOW_BYTES=0\nACCORD_MPI_MAX_COUNT=1000\n"
        "ACCORD_HIERARCHICAL_ALLREDUCE=yes\nACCORD_HIERARCHICAL_ALLGATHER=off\nACCORD_CACHE_CAPACITY=0\n"
        "ACCORD_CYCLE_TIME_MS=2.5\nACCORD_IDLE_TIMEOUT_US=1000\nACCORD_IDLE_BACKOFF_MAX_US=10000\n"
        "ACCORD_POLL_SPIN_US=20\nACCORD_POLL_WAITED_SPIN_US=0\nACCORD_POLL_MAX_SLEEP_US=1\n"
        "ACCORD_COLLECTIVE_TIMEOUT_SECONDS=0\nACCORD_GPU_OPERATIONS=NCCL\nACCORD_CUDA_HOST_EMULATION=1\n"
        "ACCORD_LOG_LEVEL=debug\nACCORD_LOG_HIDE_TIME=true\nACCORD_STALL_CHECK_TIME_SECONDS=0.001\n"
        "ACCORD_STALL_SHUTDOWN_TIME_SECONDS=1e9\nACCORD_STALL_CHECK_DISABLE=0\nACCORD_TIMELINE=/tmp/t.json\n"
        "ACCORD_TIMELINE_MARK_CYCLES=1\nACCORD_TIMELINE_MAX_MB=1048576\nACCORD_AUTOTUNE=on\n"
        "ACCORD_AUTOTUNE_WARMUP_SAMPLES=0\nACCORD_AUTOTUNE_STEPS_PER_SAMPLE=1\nACCORD_AUTOTUNE_MAX_SAMPLES=1000000\n"
        "ACCORD_AUTOTUNE_LOG=/tmp/a.csv\n");
  Write("config_env", "horovod",
        "HOROVOD_FUSION_THRESHOLD= 1048576 \nHOROVOD_CYCLE_TIME=5\nHOROVOD_CACHE_CAPACITY=2048\n"
        "HOROVOD_LOG_LEVEL=WARNING\nHOROVOD_STALL_CHECK_DISABLE=1\nHOROVOD_TIMELINE=t.json\n"
        "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=5\nHOROVOD_GPU_OPERATIONS=mpi\nACCORD_CYCLE_TIME_MS=\n");
  Write("config_env", "out_of_range", "ACCORD_CACHE_CAPACITY=-1\n");
  Write("config_env", "int_overflow", "ACCORD_FUSION_THRESHOLD=9223372036854775808\n");
  Write("config_env", "not_finite", "ACCORD_CYCLE_TIME_MS=nan\n");
  Write("config_env", "negative_zero", "ACCORD_CYCLE_TIME_MS=-0\nACCORD_STALL_SHUTDOWN_TIME_SECONDS=-0.0\n");
  Write("config_env", "bad_bool", "ACCORD_AUTOTUNE=maybe\n");
}

void LauncherSeeds() {
  Write("launcher", "hosts", '\0' + FormatHostList({{"node1", 4}, {"10.0.0.2", 1}, {"gpu-box_3.local", 8}}));
  Write("launcher", "hosts_plain", std::string("\0a,b:2, c :3", 12));
  Write("launcher", "hosts_twice", std::string("\0a:1,a:2", 8));
  Write("launcher", "hostfile",
        std::string(1, '\1') + "# two nodes\nnode1 slots=4\n\nnode2 slots=2 # small\n\tnode3\n");
  Write("launcher", "hostfile_bad", std::string(1, '\1') + "node1 slots=4 slots=2\nnode2 slots=1048577\n");
  Write("launcher", "mpi_args",
        '\2' + JoinShellWords({"--mca", "btl", "self,tcp", "-x", "A=it's", "", "a b\tc", "$HOME\\"}));
  Write("launcher", "mpi_args_quotes", std::string(1, '\2') + "--bind-to \"core\" 'a''b' c\\ d \"\\$x\\\"\"");
  Write("launcher", "report_hello", '\3' + EncodeHello("t0k3n", 3, 12345, "node1"));
  Write("launcher", "report_exit", '\3' + EncodeExit(1, {RankExit::How::kSignaled, 11, true}));
  Write("launcher", "report_not_started", '\3' + EncodeExit(0, {RankExit::How::kNotStarted, 2, false}));
  Write("launcher", "report_address", '\4' + FormatReportAddress({"abc", 40000, {"10.0.0.1", "192.168.1.7"}}));
  Write("launcher", "interfaces", std::string(1, '\5') + "eth0,10.0.0.0/24,ib0:1");
  Write("launcher", "ssh_port", std::string(1, '\5') + "2222");
  auto args = [](const std::vector<std::string>& words, const std::string& hostfile = std::string()) {
    std::string bytes(1, '\6');
    for (size_t i = 0; i < words.size(); ++i) bytes += (i ? std::string(1, '\0') : std::string()) + words[i];
    if (!hostfile.empty()) bytes += std::string(2, '\0') + hostfile;
    return bytes;
  };
  Write("launcher", "cli_np", args({"-np", "4", "python", "train.py", "--lr", "0.1"}));
  Write("launcher", "cli_hosts",
        args({"-H", "a:2,b:2", "-x", "NCCL_DEBUG=INFO", "--mpi-args=--mca btl tcp,self", "--network-interfaces", "eth0",
              "--ssh-port=2222", "--", "prog"}));
  Write("launcher", "cli_hostfile",
        args({"--hostfile", "hosts.txt", "-np", "3", "--start-timeout", "12.5", "--fusion-threshold-mb", "32",
              "--cycle-time-ms", "3", "--autotune", "--log-level", "debug", "prog"},
             "node1 slots=2\nnode2 slots=2\n"));
  Write("launcher", "cli_help", args({"--help"}));
  Write("launcher", "cli_version", args({"--version"}));
  Write("launcher", "cli_unknown", args({"--bogus", "-np", "2", "prog"}));
}

void DlpackSeeds() {
  using fuzz::DLPackInput;
  auto tensor = [](DLPackInput head, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides = {}) {
    head.ndim = static_cast<int32_t>(shape.size());
    if (!strides.empty()) head.flags |= fuzz::kStrides;
    std::string bytes(reinterpret_cast<const char*>(&head), sizeof(head));
    bytes.append(reinterpret_cast<const char*>(shape.data()), shape.size() * sizeof(int64_t));
    bytes.append(reinterpret_cast<const char*>(strides.data()), strides.size() * sizeof(int64_t));
    return bytes;
  };
  DLPackInput cpu_float;
  Write("dlpack_view", "float32_2d", tensor(cpu_float, {4, 3}));
  Write("dlpack_view", "float32_strided", tensor(cpu_float, {4, 1, 3}, {3, 7, 1}));
  Write("dlpack_view", "not_contiguous", tensor(cpu_float, {4, 3}, {1, 4}));
  Write("dlpack_view", "scalar", tensor(cpu_float, {}));
  Write("dlpack_view", "empty", tensor(cpu_float, {0, 5}, {5, 1}));
  DLPackInput cuda_int64 = cpu_float;
  cuda_int64.device_type = 2;  // kDLCUDA
  cuda_int64.device_id = 1;
  cuda_int64.dtype_code = 0;  // kDLInt
  cuda_int64.dtype_bits = 64;
  cuda_int64.byte_offset = 16;
  Write("dlpack_view", "cuda_int64_offset", tensor(cuda_int64, {2, 2}));
  DLPackInput as_bool = cpu_float;
  as_bool.dtype_code = 1;  // kDLUInt
  as_bool.dtype_bits = 8;
  as_bool.dtype_override = static_cast<uint8_t>(DataType::kBool);
  Write("dlpack_view", "uint8_as_bool", tensor(as_bool, {16}));
  DLPackInput vulkan = cpu_float;
  vulkan.device_type = 7;  // kDLVulkan
  Write("dlpack_view", "vulkan", tensor(vulkan, {1}));
  DLPackInput no_data = cpu_float;
  no_data.flags = fuzz::kNullData;
  Write("dlpack_view", "no_data", tensor(no_data, {3}));
  Write("dlpack_view", "negative_dim", tensor(cpu_float, {2, -3}));
  Write("dlpack_view", "huge_dims", tensor(cpu_float, {int64_t{1} << 40, int64_t{1} << 40}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <directory>\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  NegotiationSeeds();
  ConfigSeeds();
  LauncherSeeds();
  DlpackSeeds();
  return 0;
}
