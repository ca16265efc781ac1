#!/usr/bin/env bash
# Start one HDFS daemon of the compose stack: hdfs-entrypoint.sh namenode|datanode
#
# Replaces the apache/hadoop image's starter.sh so that the namenode is formatted exactly
# once: when its metadata directory has no current/VERSION yet, i.e. on the first start
# with an empty hdfs-name volume. Formatting a namenode that already holds metadata would
# orphan every block stored on the datanode, so an existing directory is never touched.
# The directory comes from dfs.namenode.name.dir (docker/hadoop/conf/hdfs-site.xml), not
# from a second copy of the path here.
set -euo pipefail

role="${1:-}"
hdfs="${HADOOP_HOME:-/opt/hadoop}/bin/hdfs"

case "${role}" in
  namenode)
    name_dir="$("${hdfs}" getconf -confKey dfs.namenode.name.dir)"
    name_dir="${name_dir#file://}"
    if [[ -f "${name_dir}/current/VERSION" ]]; then
      echo "hdfs-entrypoint: namenode metadata found in ${name_dir}; not formatting"
    else
      echo "hdfs-entrypoint: formatting a new namenode in ${name_dir} (first start)"
      "${hdfs}" namenode -format -nonInteractive -clusterid lakeprep
    fi
    exec "${hdfs}" namenode
    ;;
  datanode)
    exec "${hdfs}" datanode
    ;;
  *)
    echo "hdfs-entrypoint: unknown role '${role}'; expected 'namenode' or 'datanode'" >&2
    exit 64
    ;;
esac
