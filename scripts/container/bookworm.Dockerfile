# bookworm.Dockerfile -- the check that scripts/install-deps.sh is complete: on a bare Debian 12 with
# only what it installs, the whole build and the unit tests pass.
#
# scripts/container.sh builds it and throws the image away. Its first steps
# are the Dockerfile's build stage, word for word, so the engine reuses that
# stage's cached install; the image itself builds four targets only, which
# would leave test-only dependencies unchecked.
FROM debian:bookworm-slim
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFAIRQ_WERROR=ON \
 && cmake --build build -j "$(nproc)" \
 && ctest --test-dir build --output-on-failure -L unit
