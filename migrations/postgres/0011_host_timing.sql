-- Two more kinds of host record (issue 38 §3, §4): `timing` (when a call
-- went out, to what, and when its Reply was admitted) and `stderr` (the end
-- of a Tool process's stderr when it ended before answering).
ALTER TABLE host_records DROP CONSTRAINT host_records_kind_check;
ALTER TABLE host_records ADD CONSTRAINT host_records_kind_check
    CHECK (kind IN ('binding','approval','halt','pause','open-call-decision','retry','timeout','storage-failure','timing','stderr'));
