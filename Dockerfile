# fsdpp in a container: Debian bookworm, the pinned torch wheel, fsdpp built and installed in
# /opt/fsdpp. Every build step is scripts/install.sh, the script `make install` runs
# (docs/container.md; tests/build/container_steps.sh keeps the two the same).
#
#   docker build -t fsdpp .                              # CUDA parts on when a toolkit is found
#   docker build --build-arg CUDA_TOOLKIT=13-0 -t fsdpp .  # install NVIDIA's toolkit first
FROM debian:bookworm

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG CUDA_TOOLKIT=""
ENV DEBIAN_FRONTEND=noninteractive \
    FSDPP_CACHE=/opt/fsdpp-cache \
    VENV=/opt/fsdpp/venv

# make and python3 run the install; ca-certificates for pip. CUDA_TOOLKIT (e.g. 13-0) adds
# NVIDIA's CUDA compiler, runtime headers and NCCL from NVIDIA's Debian 12 repository, so that
# the CUDA parts build (the wheel brings the CUDA runtime libraries, not the compiler).
RUN apt-get update && apt-get install -y --no-install-recommends make python3 ca-certificates wget && \
    if [ -n "$CUDA_TOOLKIT" ]; then \
      wget -q https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb && \
      dpkg -i cuda-keyring_1.1-1_all.deb && rm cuda-keyring_1.1-1_all.deb && apt-get update && \
      apt-get install -y --no-install-recommends cuda-nvcc-$CUDA_TOOLKIT cuda-cudart-dev-$CUDA_TOOLKIT \
        libnccl-dev && ln -sfn /usr/local/cuda-${CUDA_TOOLKIT/-/.} /usr/local/cuda; \
    fi && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/local/cuda/bin:/opt/fsdpp/bin:$PATH

COPY . /src/fsdpp
WORKDIR /src/fsdpp
RUN make install PREFIX=/opt/fsdpp VENV=$VENV BUILD_DIR=/tmp/fsdpp-build && rm -rf /tmp/fsdpp-build

WORKDIR /workspace
CMD ["fsdpp-run", "--help"]
