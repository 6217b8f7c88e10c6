# known-failures.sh: sourced by the scripts that run an external test
# suite (s3-compat.sh, pjdfstest.sh). check_known NAME KNOWN FAILED SHOW
# compares the sorted failed test names in file FAILED with the names in
# the known-failures file KNOWN (TEST<TAB>reason, # comments) and returns
# 1, saying which, when a failure is not listed or a listed test did not
# fail, so the list stays true; SHOW is a command printing the suite's
# output for one test name.
check_known() {
	_name=$1 _known=$2 _failed=$3 _show=$4
	grep -v '^#' "$_known" | awk 'NF {print $1}' | sort -u >"$_failed.known"
	_status=0
	_unexpected=$(comm -23 "$_failed" "$_failed.known")
	if [ -n "$_unexpected" ]; then
		echo "$_name: failures not in $_known:" >&2
		for _t in $_unexpected; do $_show "$_t" | cut -c1-300 >&2; done
		_status=1
	fi
	_fixed=$(comm -13 "$_failed" "$_failed.known")
	if [ -n "$_fixed" ]; then
		echo "$_name: listed as known failures but did not fail; remove them from $_known:" >&2
		echo "$_fixed" >&2
		_status=1
	fi
	return $_status
}
