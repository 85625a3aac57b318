#include "serve/model_repository.h"

#include <malloc.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "backends/setting_text.h"
#include "core/error.h"

namespace kiln::serve {
namespace {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  KILN_CHECK(file, invalid_argument, "cannot read ", path.string());
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// A version directory's number, or none for a name that is not a positive integer.
std::optional<int64_t> version_number(const std::string& name) {
  int64_t number = 0;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), number);
  if (name.empty() || error != std::errc() || end != name.data() + name.size() || number <= 0)
    return std::nullopt;
  return number;
}

std::vector<int64_t> chosen_versions(const VersionPolicy& policy, std::vector<int64_t> available) {
  std::sort(available.begin(), available.end());
  switch (policy.kind) {
    case VersionPolicy::Kind::all:
      return available;
    case VersionPolicy::Kind::latest: {
      const size_t keep = std::min(available.size(), static_cast<size_t>(policy.num_versions));
      return {available.end() - static_cast<std::ptrdiff_t>(keep), available.end()};
    }
    case VersionPolicy::Kind::specific: {
      std::vector<int64_t> chosen;
      for (int64_t version : available) {
        if (std::find(policy.versions.begin(), policy.versions.end(), version) != policy.versions.end()) {
          chosen.push_back(version);
        }
      }
      return chosen;
    }
  }
  return available;
}

// Every batch size up to 64, then the powers of two, the preferred sizes and the maximum: large
// maxima would otherwise plan hundreds of sizes.
std::vector<int64_t> warm_up_batch_sizes(int max_batch_size, const std::vector<int>& preferred) {
  std::vector<int64_t> sizes;
  for (int64_t batch = 1; batch <= std::max(1, max_batch_size); ++batch) {
    const bool power_of_two = (batch & (batch - 1)) == 0;
    const bool is_preferred = std::find(preferred.begin(), preferred.end(), batch) != preferred.end();
    if (batch <= 64 || power_of_two || is_preferred || batch == max_batch_size) sizes.push_back(batch);
  }
  return sizes;
}

bool same_tensors(const std::vector<TensorConfig>& a, const std::vector<TensorConfig>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const TensorConfig& x, const TensorConfig& y) {
    return x.name == y.name && x.dtype == y.dtype && x.dims == y.dims;
  });
}

bool same_signature(const ModelConfig& a, const ModelConfig& b) {
  return a.max_batch_size == b.max_batch_size && same_tensors(a.inputs, b.inputs) &&
         same_tensors(a.outputs, b.outputs);
}

Shape warm_up_shape(const TensorConfig& tensor, int max_batch_size, int64_t batch) {
  Shape shape;
  if (max_batch_size > 0) shape.push_back(batch);
  for (int64_t dim : tensor.dims) shape.push_back(dim);
  return shape;
}

std::string dims_text(const Shape& shape, int max_batch_size) {
  std::string text = "[";
  if (max_batch_size > 0) text += str_cat("1..", max_batch_size);
  for (size_t i = max_batch_size > 0 ? 1 : 0; i < shape.size(); ++i) {
    text += (text.size() > 1 ? ", " : "") + (shape[i] < 0 ? std::string("-1") : std::to_string(shape[i]));
  }
  return text + "]";
}

// Hands the pages an unloaded model freed back to the system: glibc keeps freed memory in its
// arenas, so without this the process's resident memory would not fall after an unload.
void release_free_memory() {
  malloc_trim(0);
}

}  // namespace

bool ServedModel::ready() const {
  return error.empty() && !versions.empty() &&
         std::all_of(versions.begin(), versions.end(), [](const auto& entry) { return entry.second.ready; });
}

const ModelVersion* ServedModel::find(const std::string& version) const {
  if (version.empty()) {
    for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
      if (it->second.ready) return &it->second;
    }
    return versions.empty() ? nullptr : &versions.rbegin()->second;
  }
  const std::optional<int64_t> number = version_number(version);
  if (!number) return nullptr;
  const auto found = versions.find(*number);
  return found == versions.end() ? nullptr : &found->second;
}

ModelRepository::ModelRepository(std::filesystem::path root, ServerOptions options, Metrics& metrics, Log log)
    : root_(std::move(root)), options_(std::move(options)), metrics_(metrics), log_(std::move(log)) {}

ModelRepository::~ModelRepository() = default;

std::vector<std::string> ModelRepository::model_directories() const {
  std::error_code error;
  KILN_CHECK(std::filesystem::is_directory(root_, error), invalid_argument, "--model-repository ",
             root_.string(), " is not a directory");
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(root_, error)) {
    if (entry.is_directory() && entry.path().filename().string()[0] != '.')
      names.push_back(entry.path().filename());
  }
  KILN_CHECK(!error, invalid_argument, "cannot list --model-repository ", root_.string(), ": ",
             error.message());
  std::sort(names.begin(), names.end());
  return names;
}

void ModelRepository::load_all() {
  std::lock_guard control(control_mutex_);
  const std::vector<std::string> names = model_directories();
  const bool all = !options_.explicit_control ||
                   std::find(options_.startup_models.begin(), options_.startup_models.end(), "*") !=
                       options_.startup_models.end();
  for (const std::string& name : options_.startup_models) {
    if (name != "*" && std::find(names.begin(), names.end(), name) == names.end())
      log_("--load-model " + name + ": no such model directory in " + root_.string());
  }
  for (const std::string& name : names) {
    const bool chosen = all || std::find(options_.startup_models.begin(), options_.startup_models.end(),
                                         name) != options_.startup_models.end();
    if (!chosen) continue;
    {
      std::lock_guard lock(mutex_);
      loading_ = name;
    }
    std::shared_ptr<ServedModel> model = load_model(name, std::nullopt);
    std::lock_guard lock(mutex_);
    loading_.clear();
    models_[name] = std::move(model);
  }
  if (names.empty()) log_("model repository " + root_.string() + " holds no model directories");
}

std::shared_ptr<ServedModel> ModelRepository::load_model(const std::string& name,
                                                         const std::optional<std::string>& config_json) {
  auto model = std::make_shared<ServedModel>();
  model->name = name;
  const std::filesystem::path dir = root_ / name;
  ModelConfig declared;  // as the file gives it, before completion from a version's model
  try {
    const std::filesystem::path config_path = dir / "config.pbtxt";
    const std::string source = config_json ? "the load request's config" : config_path.string();
    if (config_json) {
      model->config = parse_model_config_json(*config_json, source);
    } else if (std::filesystem::exists(config_path)) {
      model->config = parse_model_config(read_text_file(config_path), source);
    }
    KILN_CHECK(model->config.name.empty() || model->config.name == name, invalid_argument, source,
               ": name \"", model->config.name, "\" differs from the directory's name \"", name, "\"");
    model->config.name = name;
    declared = model->config;
    for (const std::string& field : model->config.ignored_fields) {
      log_("model '" + name + "': config field '" + field + "' is Triton's and kiln does not act on it");
    }
    std::vector<int64_t> available;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::optional<int64_t> number = version_number(entry.path().filename());
      if (entry.is_directory() && number) available.push_back(*number);
    }
    const std::vector<int64_t> chosen = chosen_versions(model->config.version_policy, available);
    KILN_CHECK(!chosen.empty(), invalid_argument, dir.string(),
               " has no version directory the version policy picks (", available.size(),
               " numbered directories found)");
    for (int64_t number : chosen) {
      ModelVersion& version = model->versions[number];
      version.version = number;
      version.path = dir / std::to_string(number) / model->config.default_model_filename;
    }
  } catch (const std::exception& error) {
    model->error = error.what();
    log_("model '" + name + "' failed to load: " + model->error);
    return model;
  }
  for (auto& [number, version] : model->versions) load_version(*model, declared, version);
  return model;
}

void ModelRepository::drain(const ServedModel& model, const std::string& reason) {
  for (const auto& [number, version] : model.versions) {
    if (version.batcher) version.batcher->stop_accepting(str_cat(reason, " (version ", number, ")"));
  }
  for (const auto& [number, version] : model.versions) {
    if (version.batcher) version.batcher->join();
  }
}

Status ModelRepository::load(const std::string& name, const std::optional<std::string>& config_json) {
  if (!options_.explicit_control) {
    return {400,
            "model control is disabled: start kiln serve with --model-control-mode explicit to load and "
            "unload models"};
  }
  std::lock_guard control(control_mutex_);
  if (stop_loading_.load()) return {503, "the server is shutting down"};
  std::vector<std::string> names;
  try {
    names = model_directories();
  } catch (const Error& error) {
    return {500, error.what()};
  }
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return {404, "no model directory '" + name + "' in the model repository " + root_.string()};
  }
  {
    std::lock_guard lock(mutex_);
    loading_ = name;
  }
  std::shared_ptr<ServedModel> model = load_model(name, config_json);
  std::shared_ptr<const ServedModel> replaced;
  std::string reason;
  if (!model->ready()) {
    reason = model->error;
    for (const auto& [number, version] : model->versions) {
      if (reason.empty() && !version.ready) reason = str_cat("version ", number, ": ", version.error);
    }
  }
  {
    std::lock_guard lock(mutex_);
    loading_.clear();
    if (reason.empty()) {
      const auto found = models_.find(name);
      if (found != models_.end()) replaced = std::move(found->second);
      models_[name] = model;
      unavailable_.erase(name);
    } else if (models_.count(name) == 0) {
      unavailable_[name] = "failed to load: " + reason;
    }
  }
  if (!reason.empty()) {
    drain(*model, "model '" + name + "' failed to load");
    const char* still = find(name) != nullptr ? " (the version loaded before still serves)" : "";
    return {400, str_cat("model '", name, "' failed to load", still, ": ", reason)};
  }
  if (replaced) {
    // Requests resolved to the old model before the swap finish there.
    drain(*replaced, "model '" + name + "' was reloaded");
    log_("model '" + name + "' reloaded");
  }
  replaced.reset();
  release_free_memory();
  return {};
}

Status ModelRepository::unload(const std::string& name) {
  if (!options_.explicit_control) {
    return {400,
            "model control is disabled: start kiln serve with --model-control-mode explicit to load and "
            "unload models"};
  }
  std::lock_guard control(control_mutex_);
  std::shared_ptr<const ServedModel> model;
  {
    std::lock_guard lock(mutex_);
    const auto found = models_.find(name);
    if (found == models_.end()) return {404, "model '" + name + "' is not loaded"};
    model = std::move(found->second);
    models_.erase(found);
    unavailable_[name] = "unloaded";
  }
  drain(*model, "model '" + name + "' was unloaded");
  model.reset();
  release_free_memory();
  log_("model '" + name + "' unloaded");
  return {};
}

std::vector<IndexEntry> ModelRepository::index(bool ready_only) const {
  std::vector<std::string> names;
  try {
    names = model_directories();
  } catch (const Error&) {
    // The directory went away: the loaded models are still listed.
  }
  std::lock_guard lock(mutex_);
  for (const auto& [name, model] : models_) names.push_back(name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<IndexEntry> entries;
  for (const std::string& name : names) {
    const auto found = models_.find(name);
    if (found != models_.end() && found->second->error.empty()) {
      for (const auto& [number, version] : found->second->versions) {
        IndexEntry entry{name, std::to_string(number), version.ready ? "READY" : "UNAVAILABLE",
                         version.error};
        if (!ready_only || version.ready) entries.push_back(std::move(entry));
      }
      continue;
    }
    if (ready_only) continue;
    if (name == loading_) {
      entries.push_back({name, "", "LOADING", ""});
    } else if (found != models_.end()) {
      entries.push_back({name, "", "UNAVAILABLE", found->second->error});
    } else {
      const auto reason = unavailable_.find(name);
      entries.push_back(
          {name, "", "UNAVAILABLE", reason == unavailable_.end() ? "not loaded" : reason->second});
    }
  }
  return entries;
}

void ModelRepository::load_version(ServedModel& model, const ModelConfig& declared, ModelVersion& version) {
  const std::string label = str_cat("model '", model.name, "' version ", version.version);
  const Clock::time_point start = Clock::now();
  try {
    KILN_CHECK(!stop_loading_.load(), runtime, "the server shut down before it was loaded");
    Settings settings;
    for (const auto& [name, text] : declared.parameters) {
      set_setting_from_text(settings, name, text, "config.pbtxt parameters");
    }
    version.session = std::make_unique<Session>(version.path, settings);
    ModelConfig completed = declared;
    complete_model_config(completed, version.session->inputs(), version.session->outputs());
    // Requests are checked against one config per model: every version must complete to it.
    const ModelVersion* first = nullptr;
    for (const auto& [number, other] : model.versions) {
      if (other.ready && first == nullptr) first = &other;
    }
    if (first == nullptr) {
      model.config = std::move(completed);
    } else {
      KILN_CHECK(same_signature(completed, model.config), invalid_argument,
                 "its inputs, outputs or max_batch_size ", "differ from version ", first->version,
                 "'s: kiln serves one signature per model");
    }

    const ModelConfig& config = model.config;
    const int max_batch = config.max_batch_size;
    const bool fixed_dims =
        std::all_of(config.inputs.begin(), config.inputs.end(), [](const TensorConfig& tensor) {
          return std::none_of(tensor.dims.begin(), tensor.dims.end(), [](int64_t dim) { return dim < 0; });
        });
    std::vector<int64_t> warmed;
    std::string warm_up_failure;
    if (fixed_dims) {
      const std::vector<int64_t> sizes = warm_up_batch_sizes(max_batch, config.preferred_batch_sizes);
      // Runs that lease fewer threads while others are in flight plan for that count too: room for them.
      version.session->keep_plans(sizes.size() + kMaxCachedPlans);
      for (int64_t batch : sizes) {
        KILN_CHECK(!stop_loading_.load(), runtime, "the server shut down while it warmed up");
        TensorMap zeros;
        for (const TensorConfig& input : config.inputs) {
          zeros.emplace(input.name, Tensor::zeros(input.dtype, warm_up_shape(input, max_batch, batch)));
        }
        try {
          version.session->run(zeros);
          warmed.push_back(batch);
        } catch (const Error& error) {
          // Zeros are not valid input for every model (indices, shapes): its requests may still be.
          warm_up_failure = error.what();
          break;
        }
      }
    }
    version.metrics = &metrics_.model(model.name, std::to_string(version.version));
    BatcherOptions batching;
    batching.max_batch_size = max_batch;
    batching.dynamic_batching = config.dynamic_batching;
    batching.max_queue_delay = std::chrono::microseconds(config.max_queue_delay_us);
    batching.preferred_batch_sizes = config.preferred_batch_sizes;
    batching.max_queue_size = config.max_queue_size > 0 ? config.max_queue_size : options_.max_queue_size;
    batching.instances = config.instance_count;
    version.batcher = std::make_unique<Batcher>(*version.session, batching, *version.metrics);
    version.ready = true;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    char load_time[32];
    std::snprintf(load_time, sizeof load_time, "%.2f s", seconds);
    std::string warm_up = str_cat(warmed.size(), " batch sizes warmed up");
    if (!fixed_dims) warm_up = "no warm-up: an input has a variable dim";
    if (!warm_up_failure.empty()) warm_up += str_cat(", warm-up on zeros stopped: ", warm_up_failure);
    log_(str_cat(label, " ready (", warm_up, ", max_batch_size ", max_batch,
                 config.dynamic_batching ? ", dynamic batching" : "", ", ", config.instance_count,
                 config.instance_count == 1 ? " instance, " : " instances, ",
                 version.session->settings().describe_plan_settings(), ", ", load_time, ")"));
  } catch (const std::exception& error) {
    version.error = error.what();
    version.batcher.reset();
    version.session.reset();
    log_(label + " failed to load: " + version.error);
  }
}

void ModelRepository::stop_loading() {
  stop_loading_.store(true);
}

bool ModelRepository::all_ready() const {
  std::lock_guard lock(mutex_);
  return std::all_of(models_.begin(), models_.end(), [](const auto& entry) { return entry.second->ready(); });
}

std::shared_ptr<const ServedModel> ModelRepository::find(const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto found = models_.find(name);
  return found == models_.end() ? nullptr : found->second;
}

std::vector<std::shared_ptr<const ServedModel>> ModelRepository::models() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<const ServedModel>> models;
  for (const auto& [name, model] : models_) models.push_back(model);
  return models;
}

ValidatedRequest ModelRepository::validate(const ServedModel& model, InferRequest& request,
                                           Clock::time_point arrived) const {
  const ModelConfig& config = model.config;
  ValidatedRequest validated;
  validated.pending = std::make_shared<PendingRequest>();
  PendingRequest& pending = *validated.pending;
  pending.arrived = arrived;
  int64_t batch = -1;
  for (auto& entry : request.inputs) {
    const std::string& name = entry.first;  // clang 14 cannot capture structured bindings
    Tensor& tensor = entry.second;
    const auto found = std::find_if(config.inputs.begin(), config.inputs.end(),
                                    [&](const TensorConfig& input) { return input.name == name; });
    if (found == config.inputs.end()) {
      std::string known;
      for (const TensorConfig& input : config.inputs)
        known += (known.empty() ? "'" : ", '") + input.name + "'";
      fail(ErrorKind::invalid_argument, "model '", model.name, "' has no input '", name,
           "' (its inputs: ", known, ")");
    }
    KILN_CHECK(tensor.dtype() == found->dtype, type_mismatch, "input '", name, "' has datatype ",
               protocol_dtype_name(tensor.dtype()), ", model '", model.name, "' expects ",
               protocol_dtype_name(found->dtype));
    const Shape expected = warm_up_shape(*found, config.max_batch_size, -1);
    bool agrees = tensor.rank() == static_cast<int64_t>(expected.size());
    for (size_t i = 0; agrees && i < expected.size(); ++i)
      agrees = expected[i] < 0 || tensor.shape()[i] == expected[i];
    KILN_CHECK(agrees, invalid_argument, "input '", name, "' has shape ", shape_to_string(tensor.shape()),
               ", model '", model.name, "' expects ", dims_text(expected, config.max_batch_size));
    if (config.max_batch_size > 0) {
      const int64_t rows = tensor.shape()[0];
      KILN_CHECK(rows >= 1 && rows <= config.max_batch_size, invalid_argument, "input '", name,
                 "' has a batch of ", rows, ", model '", model.name, "' takes 1 to max_batch_size ",
                 config.max_batch_size);
      KILN_CHECK(batch < 0 || rows == batch, invalid_argument, "inputs disagree on the batch size (", batch,
                 " and ", rows, ")");
      batch = rows;
    }
    pending.inputs.emplace(name, std::move(tensor));
  }
  for (const TensorConfig& input : config.inputs) {
    KILN_CHECK(pending.inputs.count(input.name) != 0, invalid_argument, "input '", input.name, "' of model '",
               model.name, "' is missing");
  }
  pending.rows = std::max<int64_t>(1, batch);
  if (request.outputs.empty()) {
    for (const TensorConfig& output : config.outputs) validated.outputs.push_back(output.name);
  } else {
    for (const RequestedOutput& requested : request.outputs) {
      const bool known =
          std::any_of(config.outputs.begin(), config.outputs.end(),
                      [&](const TensorConfig& output) { return output.name == requested.name; });
      KILN_CHECK(known, invalid_argument, "model '", model.name, "' has no output '", requested.name, "'");
      validated.outputs.push_back(requested.name);
    }
  }
  const int64_t timeout_us =
      request.timeout_us > 0
          ? request.timeout_us
          : (config.default_timeout_us > 0 ? config.default_timeout_us : options_.request_timeout_us);
  if (timeout_us > 0) pending.deadline = pending.arrived + std::chrono::microseconds(timeout_us);
  return validated;
}

void ModelRepository::stop_accepting() {
  for (const auto& model : models()) {
    for (const auto& [number, version] : model->versions) {
      if (version.batcher) version.batcher->stop_accepting();
    }
  }
}

void ModelRepository::abort(const std::string& reason) {
  for (const auto& model : models()) {
    for (const auto& [number, version] : model->versions) {
      if (version.batcher) version.batcher->abort(reason);
    }
  }
}

void ModelRepository::join() {
  for (const auto& model : models()) {
    for (const auto& [number, version] : model->versions) {
      if (version.batcher) version.batcher->join();
    }
  }
}

}  // namespace kiln::serve
