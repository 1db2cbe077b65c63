/* cudnn_app.h, loading cuDNN and the driver late with dlopen (see there). */
#include "cudnn_app.h"
