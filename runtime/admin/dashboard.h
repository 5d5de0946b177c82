// Dashboard assets: the files of runtime/admin/dashboard/ (html, js, css), embedded in the binary
// at build time by runtime/admin/dashboard/embed.cmake, served by the admin API at `GET /` and
// `GET /<file>`. Constant data; safe from any thread.
#pragma once

#include <span>
#include <string_view>

namespace weir {

struct DashboardAsset {
  std::string_view path;  // "/index.html", "/dashboard.js", ...
  std::string_view content_type;
  std::string_view body;
};

std::span<const DashboardAsset> dashboard_assets();

}  // namespace weir
