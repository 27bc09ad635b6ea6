# framezip container: build on the CUDA devel image, run on the CUDA runtime image with only what
# the binaries need, as a non-root user.
#   docker build -t framezip .
#   docker run --gpus all -p 50051:50051 -p 9464:9464 framezip
# A CPU-only image: docker build --build-arg FRAMEZIP_CUDA=OFF -t framezip:cpu .
# Ubuntu 24.04 carries the same gRPC (1.51), protobuf (3.21) and Abseil as Debian 12, which CI
# builds against.
ARG CUDA_VERSION=12.6.3
ARG UBUNTU=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
ARG FRAMEZIP_CUDA=AUTO
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends \
      g++ cmake ninja-build ccache pkg-config make git \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev libssl-dev \
      libspdlog-dev nlohmann-json3-dev libyaml-cpp-dev prometheus-cpp-dev libboost-dev \
      libopenblas-dev libonig-dev libutf8proc-dev \
      libavformat-dev libavcodec-dev libavutil-dev libswscale-dev \
      libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev \
      libhiredis-dev libseccomp-dev catch2 \
      # python3-venv: scripts/fetch-flashinfer.sh gets FlashInfer's headers through pip.
      python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# sm_80 (A100), sm_90 (H100/H200) machine code + compute_90 PTX for newer GPUs.
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
      -DFRAMEZIP_CUDA=${FRAMEZIP_CUDA} -DCMAKE_CUDA_ARCHITECTURES="80-real;90" \
    && cmake --build /build -j"$(nproc)" --target framezip framezip-server framezip-kvstore \
         framezip-media-worker \
    && mkdir -p /out/bin /out/lib \
    # framezip-media-worker sits beside framezip-server, where the server starts it from.
    && cp /build/bin/framezip /build/bin/framezip-server /build/bin/framezip-kvstore \
          /build/bin/framezip-media-worker /out/bin/ \
    # The runtime image gets exactly the shared libraries the binaries load (not glibc, not the
    # CUDA runtime, which the runtime image has), so it needs no -dev packages and no compiler.
    && ldd /out/bin/* | awk '/=> \// {print $3}' | sort -u \
       | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libcuda|libcudart|libcublas[^/]*)\.so' \
       | xargs -r -I{} cp -L {} /out/lib/

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
RUN useradd --system --uid 10001 --home /var/lib/framezip --create-home framezip
COPY --from=build /out/lib/ /usr/local/lib/framezip/
RUN echo /usr/local/lib/framezip > /etc/ld.so.conf.d/framezip.conf && ldconfig
COPY --from=build /out/bin/ /usr/local/bin/
COPY models/ /opt/framezip/models/
USER framezip
WORKDIR /var/lib/framezip
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
  CMD ["framezip", "health", "--server", "127.0.0.1:50051"]
ENTRYPOINT ["framezip-server"]
CMD ["--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464", \
     "--model", "/opt/framezip/models/framezip-tiny-video"]
