#!/usr/bin/env python3
"""A framezip.v1.VideoChat client in Python: create a session, upload a video, ask questions,
stream the answers, print each turn's stats.

    pip install -r examples/python/requirements.txt
    python examples/python/chat_client.py --server 127.0.0.1:50051 --video clip.mp4 \
        --question "What happens?" --question "And then?"

Frames that are already decoded (RGB24, e.g. from a hardware decoder or a camera) are uploaded
as they are, no container or codec involved:

    ffmpeg -i clip.mp4 -f rawvideo -pix_fmt rgb24 frames.rgb
    python examples/python/chat_client.py --raw-frames frames.rgb --width 64 --height 48 \
        --fps 10 --question "What happens?"

The gRPC stubs are generated at start from proto/ with grpcio-tools, or with the system's protoc
and grpc_python_plugin where grpcio comes from Debian (python3-grpcio); nothing is checked in, so
the example always matches the server's API. Prints one JSON object per turn on stdout, the
answer text included, and the last line is a JSON summary (for scripts and tests).
"""

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
CHUNK_BYTES = 1 << 20  # well under the server's 4 MiB per-chunk limit


def generate_stubs(proto, out_dir):
    """Runs protoc with the gRPC Python plugin: grpcio-tools' bundled protoc when installed (pip),
    else the system's protoc and grpc_python_plugin (Debian: protobuf-compiler,
    protobuf-compiler-grpc), so the example also runs on Debian's python3-grpcio."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        plugin = shutil.which("grpc_python_plugin")
        if shutil.which("protoc") is None or plugin is None:
            sys.exit("chat_client: needs grpcio-tools (pip install -r "
                     "examples/python/requirements.txt) or protoc + grpc_python_plugin")
        return subprocess.call(["protoc", f"-I{PROTO_ROOT}", f"--python_out={out_dir}",
                                f"--grpc_python_out={out_dir}",
                                f"--plugin=protoc-gen-grpc_python={plugin}", proto])
    # grpc_tools ships the well-known protos; the include path for them comes with the package.
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    return protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{well_known}",
                        f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", proto])


def load_stubs(out_dir):
    """Generates video_chat_pb2 / _pb2_grpc into out_dir and imports them."""
    proto = os.path.join(PROTO_ROOT, "framezip", "v1", "video_chat.proto")
    if generate_stubs(proto, out_dir) != 0:
        sys.exit(f"chat_client: protoc failed on {proto}")
    sys.path.insert(0, out_dir)
    pb2 = importlib.import_module("framezip.v1.video_chat_pb2")
    pb2_grpc = importlib.import_module("framezip.v1.video_chat_pb2_grpc")
    return pb2, pb2_grpc


def upload(stub, pb2, session_id, path, metadata):
    size = os.path.getsize(path)

    def messages():
        yield pb2.UploadMediaRequest(metadata=pb2.MediaMetadata(
            session_id=session_id, name=os.path.basename(path), mime_type="video/mp4",
            declared_size_bytes=size))
        with open(path, "rb") as f:
            while True:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    break
                yield pb2.UploadMediaRequest(chunk=chunk)

    return stub.UploadMedia(messages(), metadata=metadata, timeout=120)


def upload_raw_frames(stub, pb2, session_id, path, width, height, fps, stride, metadata):
    """Uploads a file of RGB24 frames (rows of `stride` bytes, frame after frame, as ffmpeg's
    `-f rawvideo -pix_fmt rgb24` writes them with stride = 3 * width) shown at `fps` frames a
    second from time 0. The pixels travel in chunks as a container's bytes would; the server
    checks the layout against the size before it takes a chunk."""
    size = os.path.getsize(path)
    frame_bytes = stride * height
    if size == 0 or size % frame_bytes != 0:
        sys.exit(f"chat_client: {path} is {size} bytes, not a whole number of "
                 f"{width}x{height} frames of {frame_bytes} bytes")
    count = size // frame_bytes
    raw = pb2.RawFrames(width=width, height=height, stride_bytes=stride, frame_count=count,
                        timestamps_us=[round(i * 1e6 / fps) for i in range(count)])

    def messages():
        yield pb2.UploadMediaRequest(metadata=pb2.MediaMetadata(
            session_id=session_id, name=os.path.basename(path), declared_size_bytes=size,
            raw_frames=raw))
        with open(path, "rb") as f:
            while True:
                chunk = f.read(CHUNK_BYTES)
                if not chunk:
                    break
                yield pb2.UploadMediaRequest(chunk=chunk)

    return stub.UploadMedia(messages(), metadata=metadata, timeout=120)


def ask(stub, pb2, session_id, question, metadata, echo):
    answer = []
    stats = None
    for response in stub.Chat(pb2.ChatRequest(session_id=session_id, text=question),
                              metadata=metadata, timeout=600):
        kind = response.WhichOneof("event")
        if kind == "delta":
            answer.append(response.delta.text)
            if echo:
                print(response.delta.text, end="", flush=True, file=sys.stderr)
        elif kind == "stats":
            stats = response.stats
    if echo:
        print(file=sys.stderr)
    return "".join(answer), stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="127.0.0.1:50051", help="server address")
    parser.add_argument("--video", help="a video file to upload first")
    parser.add_argument("--raw-frames", help="a file of decoded RGB24 frames to upload first "
                        "(with --width, --height, --fps; --stride when rows are padded)")
    parser.add_argument("--width", type=int, default=0, help="raw frames: width in pixels")
    parser.add_argument("--height", type=int, default=0, help="raw frames: height in pixels")
    parser.add_argument("--fps", type=float, default=0, help="raw frames: frames per second")
    parser.add_argument("--stride", type=int, default=0,
                        help="raw frames: bytes per row (default 3 * width)")
    parser.add_argument("--question", action="append", default=[],
                        help="a question (repeat for several turns in one session)")
    parser.add_argument("--token", default=os.environ.get("FRAMEZIP_TOKEN", ""),
                        help="bearer token when the server requires one")
    parser.add_argument("--quiet", action="store_true", help="do not echo answers on stderr")
    args = parser.parse_args()
    if not args.question:
        args.question = ["What happens in the video?"]
    if args.raw_frames and (args.width <= 0 or args.height <= 0 or args.fps <= 0):
        parser.error("--raw-frames needs --width, --height and --fps")

    metadata = [("authorization", f"Bearer {args.token}")] if args.token else []
    with tempfile.TemporaryDirectory() as gen_dir:
        pb2, pb2_grpc = load_stubs(gen_dir)
        channel = grpc.insecure_channel(args.server, options=[
            ("grpc.keepalive_time_ms", 30000),  # the server tolerates 30 s pings
            ("grpc.max_receive_message_length", 64 << 20)])
        stub = pb2_grpc.VideoChatStub(channel)
        try:
            session = stub.CreateSession(pb2.CreateSessionRequest(), metadata=metadata,
                                         timeout=30)
            uploads = []
            if args.video:
                uploads.append(upload(stub, pb2, session.session_id, args.video, metadata))
            if args.raw_frames:
                uploads.append(upload_raw_frames(
                    stub, pb2, session.session_id, args.raw_frames, args.width, args.height,
                    args.fps, args.stride or 3 * args.width, metadata))
            for media in uploads:
                print(json.dumps({"media_id": media.media_id, "mime_type": media.mime_type,
                                  "duration_s": media.duration_seconds,
                                  "frames": len(media.frame_timestamps),
                                  "visual_tokens": media.visual_tokens}), flush=True)
            turns = []
            for question in args.question:
                answer, stats = ask(stub, pb2, session.session_id, question, metadata,
                                    not args.quiet)
                turn = {"question": question, "answer": answer,
                        "ttft_s": stats.time_to_first_token_seconds,
                        "prompt_tokens": stats.prompt_tokens,
                        "cached_tokens": stats.cached_tokens,
                        "generated_tokens": stats.generated_tokens,
                        "decode_tok_s": stats.decode_tokens_per_second}
                turns.append(turn)
                print(json.dumps(turn), flush=True)
            stub.DeleteSession(pb2.DeleteSessionRequest(session_id=session.session_id),
                               metadata=metadata, timeout=30)
        except grpc.RpcError as e:
            sys.exit(f"chat_client: {e.code().name}: {e.details()}")
    print(json.dumps({"session_id": session.session_id, "turns": turns}))


if __name__ == "__main__":
    main()
