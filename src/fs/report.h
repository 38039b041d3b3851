// Rendering of the daemon's status page and metrics, kept out of Fs: both only read state.
#pragma once
#include <string>

namespace fencefs::fs {

class Fs;

// The JSON snapshot served as .fencefs/status (schema: docs/status-json.md).
std::string render_status_json(Fs& f);
// Prometheus text exposition served as .fencefs/metrics.
std::string render_metrics(Fs& f);

}  // namespace fencefs::fs
