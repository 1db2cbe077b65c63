#pragma once
// The one version string of the shim, the command and the reports.
#define GPUGUARD_VERSION_STRING "0.1.0"
