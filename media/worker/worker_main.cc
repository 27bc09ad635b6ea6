// framezip-media-worker: decodes one media request in a sandboxed process for framezip-server
// (media/worker/worker_process.h).
#include "media/worker/worker_process.h"

int main(int argc, char** argv) { framezip::media::worker::RunWorker(argc, argv); }
