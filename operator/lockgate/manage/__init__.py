"""Management API (`/v1/endpoints`) and the control planes it writes through."""
